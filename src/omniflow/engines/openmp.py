"""The OpenMP wait policy of the engines that compute with OpenMP threads.

llama.cpp (the dialogue's model) and CTranslate2 (Whisper, in the fusion node; its wheel
carries its own libgomp) run their CPU work on OpenMP threads, and by default an idle one
spins before it sleeps. On a robot the other nodes keep the cores busy, so spinning threads
take cycles from them and wait longer for their own. Passive waiting costs an engine alone on
a quiet machine (Whisper's decode up to a quarter, llama.cpp's decode more) and wins in the
graph: 32 llama.cpp tokens came up to 10x sooner with the other core busy, and the bundled
session's end of speech -> speaker fell by about a tenth (benchmarks/README.md). A user's
own ``OMP_WAIT_POLICY`` is kept. libgomp reads it once, when it is loaded, so the engines
call :func:`set_openmp_wait_policy` before their first import.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

__all__ = ["set_openmp_wait_policy"]


def set_openmp_wait_policy(environ: MutableMapping[str, str] | None = None) -> str:
    """Let idle OpenMP threads sleep: ``OMP_WAIT_POLICY=PASSIVE`` unless it is already set.

    ``environ`` defaults to ``os.environ``; a user's own setting wins. Returns the policy now
    in effect. Call it where the process loads an engine, before the engine's library is
    imported (it has no effect on a libgomp that is already loaded); child processes inherit
    it.
    """
    env = os.environ if environ is None else environ
    return env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
