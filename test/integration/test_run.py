"""Tier 2: `omniflow run --profile replay --bag` starts the replay graph in child processes,
plays the bag into it on /clock, and Ctrl-C stops every node."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid

from omniflow.msg import Transcript
from omniflow.resources import sample
from omniflow.ros.monitor import TopicRecorder
from omniflow.ros.qos import EVENTS


def test_run_replay_profile_plays_the_bag_into_the_graph(ros_node):
    namespace = f"/t{uuid.uuid4().hex[:6]}"
    transcripts = TopicRecorder(ros_node, Transcript, f"{namespace}/transcript", EVENTS)
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "omniflow.cli",
            "run",
            "--profile",
            "replay",
            "--bag",
            str(sample("session.mcap")),
            "--namespace",
            namespace,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        finals = transcripts.wait_until(
            lambda msgs: sum(m.is_final for m in msgs) >= 2, 180, "two final transcripts"
        )
        assert [m.utterance_id for m in finals if m.is_final][:2] == [1, 2]
        run.send_signal(signal.SIGINT)
        output, _ = run.communicate(timeout=60)
    finally:
        if run.poll() is None:  # a failed wait: the node processes must not outlive the test
            run.send_signal(signal.SIGINT)  # the nodes run in sessions of their own: only
            try:  # `omniflow run` itself stops them
                run.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(run.pid, signal.SIGKILL)
                run.wait(10)
    assert run.returncode == 0, output
    assert "started fusion" in output and "started speech" in output
    assert "stopping the nodes" in output
