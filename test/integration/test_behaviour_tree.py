"""The example py_trees tree drives the real dialogue node through the converse action."""

from __future__ import annotations

import threading
import time

import py_trees
from dialogue_graph import ANSWER_TIMEOUT_S, Graph

from omniflow.bt import Converse, example_tree, run_tree
from omniflow.msg import Transcript
from omniflow.ros import conversions
from omniflow.ros.qos import EVENTS


def test_the_example_tree_greets_then_answers_the_visitor(ros_node, start_node):
    graph = Graph(ros_node, start_node)
    graph.wait_active()
    root = example_tree(ros_node, listen_timeout_s=ANSWER_TIMEOUT_S)
    for behaviour in root.children:
        behaviour.action_name = graph.topic("converse")
    transcript = ros_node.create_publisher(Transcript, graph.topic("transcript"), EVENTS)

    def visitor_asks() -> None:
        # Once the tree listens (the greeting is done and the dialogue node has accepted the
        # listen goal: a RUNNING behaviour has only sent it), the visitor speaks. Heard
        # before the goal waits for it, the question would be an ordinary turn.
        listen = root.children[1]
        while not listen.feedback_message.startswith("answering"):
            time.sleep(0.05)
        time.sleep(0.5)
        now_ns = ros_node.get_clock().now().nanoseconds
        transcript.publish(
            Transcript(
                header=conversions.header(now_ns, "microphone"),
                utterance_id=1,
                start=conversions.time_from_ns(now_ns - 10**9),
                end=conversions.time_from_ns(now_ns),
                text="where is the kitchen",
                confidence=float("nan"),
                is_final=True,
            )
        )

    threading.Thread(target=visitor_asks, daemon=True).start()
    status = run_tree(root, ticks_hz=20, timeout_s=2 * ANSWER_TIMEOUT_S, node=ros_node)
    greet, answer = root.children
    assert status == py_trees.common.Status.SUCCESS, [b.feedback_message for b in root.children]
    assert greet.result.response.strip()
    assert answer.result.transcript.text == "where is the kitchen"
    assert answer.result.response.strip()
    board = py_trees.blackboard.Client(name="check")
    board.register_key("answer", access=py_trees.common.Access.READ)
    assert board.answer == answer.result.response


def test_a_busy_robot_makes_the_behaviour_fail_with_a_reason(ros_node, start_node):
    graph = Graph(ros_node, start_node, speech=False)
    graph.wait_active()
    first = Converse(
        "long",
        ros_node,
        prompt="Tell me a long story about the sea.",
        action_name=graph.topic("converse"),
    )
    second = Converse("refused", ros_node, prompt="Say yes.", action_name=graph.topic("converse"))
    root = py_trees.composites.Parallel(
        name="both", policy=py_trees.common.ParallelPolicy.SuccessOnAll(), children=[first, second]
    )
    run_tree(root, ticks_hz=20, timeout_s=ANSWER_TIMEOUT_S, node=ros_node)
    # Both goals leave on the first tick; whichever the server takes second is refused (the
    # parallel then stops the other one).
    refused = [b for b in (first, second) if b.status == py_trees.common.Status.FAILURE]
    assert len(refused) == 1, [(b.name, b.status, b.feedback_message) for b in (first, second)]
    assert "busy" in refused[0].feedback_message
