"""Test-wide settings: keep DDS on this machine and away from other runs; let llama.cpp's
idle threads sleep."""

import os
import random
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from omniflow.engines.llm import set_openmp_wait_policy


def _domain_id() -> str:
    """The session's DDS domain: ``ROS_DOMAIN_ID`` when set, else a random one; a pytest-xdist
    worker ``gwN`` takes the N-th domain after it (wrapping within 1..101), so that two workers
    running graphs side by side never hear each other either."""
    base = int(os.environ.get("ROS_DOMAIN_ID") or random.randint(1, 101))
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    return str((base - 1 + worker) % 101 + 1)


# Discovery and traffic stay on the loopback interface, and each test session gets its own
# domain so that two runs on one machine (or a robot on the same network) never cross.
os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
os.environ["ROS_DOMAIN_ID"] = _domain_id()
# A test run started in the background of a script (`make test &`) ignores SIGINT, as shells
# start background commands, and every process a test starts would inherit that and ignore the
# SIGINT that stops it. Nodes install their own handler; the tests' own stand-ins do not.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# Before any test imports llama_cpp (libgomp reads it once, when loaded), as the dialogue node
# sets it before it loads a model; node and server processes the tests start inherit it.
set_openmp_wait_policy()


@pytest.fixture(scope="session")
def tls_certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and localhost, made now with openssl, and its
    key (PEM files): a server with its own CA."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed (apt install openssl)")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]
        + ["-nodes", "-days", "1", "-subj", "/CN=omniflow test server"]
        + ["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"]
        + ["-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    return cert, key
