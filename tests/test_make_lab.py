"""`make lab` serves JupyterLab on localhost with token auth, and /lab answers 200."""
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from helpers.launch import runner

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _status(url: str, wait: float = 30) -> int:
    """The HTTP status of a GET, retrying while the server is not listening yet."""
    deadline = time.monotonic() + wait
    while True:
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return response.status
        except urllib.error.HTTPError as error:
            return error.code
        except urllib.error.URLError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_lab_serves_the_course_on_localhost_with_a_token(tmp_path):
    port = _free_port()
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path), "JUPYTER_CONFIG_DIR": str(tmp_path)}
    lab = subprocess.Popen(
        ["make", "-s", "lab", f"LAB_ARGS=--port={port} --port-retries=0 --no-browser"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )
    try:
        deadline, log, url = time.monotonic() + 120, "", None
        while url is None and time.monotonic() < deadline and lab.poll() is None:
            log += lab.stdout.readline()
            found = re.search(rf"http://127\.0\.0\.1:{port}/lab\?token=(\w+)", log)
            url = found and found.group(0)
        assert url, f"make lab printed no URL:\n{log[-2000:]}"
        assert _status(url) == 200
        assert _status(f"http://127.0.0.1:{port}/api/contents") == 403, "the server answers without a token"
    finally:  # make's group (JupyterLab in it), while its number is still theirs (see runner.group_is_ours)
        if runner.group_is_ours(lab):
            os.killpg(lab.pid, signal.SIGTERM)
        try:
            lab.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(lab.pid, signal.SIGKILL)
