"""A learner's session through the hub's own APIs, for tests/test_hub.py and `make bench-hub`.

With the hub's service token (tools.hub.Hub(token=...)): start a learner's server
(/hub/api/users/NAME/server), start a kernel in it (/user/NAME/api/kernels) and run code there
over the kernel's websocket, as JupyterLab does; `run_all` runs a notebook's code cells in order.
"""
from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field

import nbformat
import requests
import websocket

READY_SECONDS = 60.0


class HubClientError(Exception):
    """A request to the hub failed; the message says which and why."""


def _message(frame: str | bytes) -> dict:
    """A kernel message from a websocket frame: JSON text, or Jupyter's binary frame (a count of
    parts, their offsets, the JSON message, then binary buffers such as a widget's)."""
    if isinstance(frame, str):
        return json.loads(frame)
    parts = int.from_bytes(frame[:4], "big")
    offsets = [int.from_bytes(frame[4 + 4 * i:8 + 4 * i], "big") for i in range(parts)]
    return json.loads(frame[offsets[0]:offsets[1] if parts > 1 else None])


@dataclass
class Output:
    """What a cell printed, and its error if it raised."""

    text: str = ""
    error: str = ""
    seconds: float = 0.0


@dataclass
class Learner:
    """One learner's server and kernel, reached through the hub at `url`."""

    url: str
    name: str
    token: str
    kernel: str = ""
    socket: websocket.WebSocket | None = field(default=None, repr=False)

    def _api(self, method: str, path: str, **kwargs) -> requests.Response:
        reply = requests.request(method, f"{self.url}{path}", timeout=30,
                                 headers={"Authorization": f"token {self.token}"}, **kwargs)
        if reply.status_code >= 400:
            raise HubClientError(f"{method} {path}: {reply.status_code} {reply.text[:200]}")
        return reply

    def start(self) -> "Learner":
        """Start the learner's server (if it is not running) and a kernel in it."""
        def server() -> dict:
            return self._api("GET", f"/hub/api/users/{self.name}").json()["servers"].get("", {})

        if not server():
            self._api("POST", f"/hub/api/users/{self.name}/server")
        deadline = time.monotonic() + READY_SECONDS
        while not server().get("ready"):
            if time.monotonic() > deadline:
                raise HubClientError(f"{self.name}'s server was not ready within {READY_SECONDS:g} s")
            time.sleep(0.3)
        self.kernel = self._api("POST", f"/user/{self.name}/api/kernels",  # cwd: the notebooks' folder
                                json={"name": "python3", "path": "00_fake_devices.ipynb"}).json()["id"]
        ws_url = self.url.replace("http", "ws", 1) + f"/user/{self.name}/api/kernels/{self.kernel}/channels"
        self.socket = websocket.create_connection(ws_url, header=[f"Authorization: token {self.token}"],
                                                  timeout=READY_SECONDS)
        return self

    def run(self, code: str, timeout: float = 300.0) -> Output:
        """Run `code` in the kernel; what it printed (stdout, results) and its error, if any."""
        msg_id = uuid.uuid4().hex
        self.socket.send(json.dumps({
            "header": {"msg_id": msg_id, "msg_type": "execute_request", "username": self.name,
                       "session": self.kernel, "version": "5.3"},
            "parent_header": {}, "metadata": {}, "channel": "shell",
            "content": {"code": code, "silent": False, "store_history": False,
                        "user_expressions": {}, "allow_stdin": False, "stop_on_error": True}}))
        out, start = Output(), time.monotonic()
        replied = idle = False
        while not (replied and idle):
            if time.monotonic() - start > timeout:
                raise HubClientError(f"{self.name}'s cell did not finish within {timeout:g} s")
            self.socket.settimeout(timeout)
            msg = _message(self.socket.recv())
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                out.text += content["text"]
            elif kind in ("execute_result", "display_data"):
                out.text += content["data"].get("text/plain", "") + "\n"
            elif kind == "error":
                out.error = f"{content['ename']}: {content['evalue']}"
            elif kind == "execute_reply":
                replied = True
            elif kind == "status" and content["execution_state"] == "idle":
                idle = True
        out.seconds = time.monotonic() - start
        return out

    def run_all(self, notebook_path, timeout: float = 300.0) -> list[Output]:
        """Every code cell of a notebook, in order, stopping at the first error (as Run All does)."""
        outputs = []
        for cell in nbformat.read(notebook_path, as_version=4).cells:
            if cell.cell_type == "code":
                outputs.append(self.run(cell.source, timeout))
                if outputs[-1].error:
                    break
        return outputs

    def close(self) -> None:
        """Close the websocket and shut the kernel down (the server keeps running)."""
        if self.socket is not None:
            self.socket.close()
        if self.kernel:
            try:
                self._api("DELETE", f"/user/{self.name}/api/kernels/{self.kernel}")
            except (HubClientError, requests.RequestException):
                pass
