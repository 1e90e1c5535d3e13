"""Test set-up shared by every test file.

- Unit tests see 8 fake CPU devices (set before anything imports JAX).
- nbval ignores stderr that is only JAX/absl log noise, so a harmless log line cannot fail a
  notebook; a cell that raises still fails (nbval checks errors apart from outputs).
"""
from helpers.devices import use_fake_devices
from helpers.launch_result import LOG_NOISE

use_fake_devices(8)


def _without_log_noise(outputs):
    kept = []
    for output in outputs:
        if output.get("output_type") == "stream" and output.get("name") == "stderr":
            lines = [line for line in output["text"].splitlines() if line.strip() and not LOG_NOISE.match(line)]
            if not lines:
                continue
            output = {**output, "text": "\n".join(lines) + "\n"}
        kept.append(output)
    return kept


def _patch_nbval() -> None:
    try:
        import nbval.plugin as plugin
    except ImportError:
        return
    original = plugin.transform_streams_for_comparison
    plugin.transform_streams_for_comparison = lambda outputs: original(_without_log_noise(outputs))


_patch_nbval()
