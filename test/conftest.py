"""Test-wide settings: keep DDS on this machine and away from other runs; let llama.cpp's
idle threads sleep."""

import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from omniflow.engines.llm import set_openmp_wait_policy

# Discovery and traffic stay on the loopback interface, and each test session gets its own
# domain so that two runs on one machine (or a robot on the same network) never cross.
os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
os.environ.setdefault("ROS_DOMAIN_ID", str(random.randint(1, 101)))
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
