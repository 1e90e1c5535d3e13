"""A timeline of several hosts' traces: a row per host's Python thread, a row per device.

Each host's trace counts time from its own start, so the hosts' clocks are lined up where a
collective ends: a collective ends at (nearly) the same moment on every host, once the last
one has joined it (each device's n-th collective is step n's: one all-reduce per step). In a
loop that does not block on each step, a host's step annotation ends when the step is
dispatched, and its devices run the step's ops later: the device rows show every op in the
drawn time span, not only those that start inside a step annotation. On the Python row, the step annotations are outlined and named, and the
host's own work (input, sleep) is grey; on the device rows, collectives are red and every other
XLA op is blue.

>>> draw_timeline(read_hosts(root), steps=(1, 2, 3))   # doctest: +SKIP
"""
from __future__ import annotations

from matplotlib.patches import Patch, Rectangle

from helpers.pictures.described import DescribedFigure, described
from helpers.measure.traces import Event, collectives, is_collective, steps as step_spans

COLLECTIVE, COMPUTE, HOST_WORK, STEP_EDGE = "#C0102A", "#0072B2", "#999999", "#222222"
HOST_NAMES = ("input", "$time sleep")  # host-side events worth a box on the Python row
_ROW_H, _WIDTH = 0.32, 7.8


def _offsets(traces: dict[int, list[Event]], first_step: int) -> dict[int, float]:
    """Per host, the time (us) to subtract so that the collective of step `first_step` ends at 0.

    Each device's collectives are counted from the start of the first step annotation, one per
    step (the course's train step has one all-reduce): counted, not looked up inside the step's
    annotation, because in a loop that does not block a step's ops run after its annotation.
    """
    offsets = {}
    for host, events in traces.items():
        spans = step_spans(events)
        by_device: dict[int, list[Event]] = {}
        for e in collectives(events):
            if spans and e.start_us >= spans[0].start_us:
                by_device.setdefault(e.device, []).append(e)
        first = spans[0].step if spans else 0
        ends = [ops[first_step - first].end_us for ops in by_device.values() if 0 <= first_step - first < len(ops)]
        if not ends:
            raise ValueError(f"host {host}'s trace has no collective in step {first_step}")
        offsets[host] = min(ends)
    return offsets


def draw_timeline(traces: dict[int, list[Event]], *, steps: tuple[int, ...] = (1, 2), title: str | None = None,
                  host_names: tuple[str, ...] = HOST_NAMES) -> DescribedFigure:
    """Rows per host: its Python thread (step annotations, input, sleep), then one per device."""
    import matplotlib.pyplot as plt

    offsets = _offsets(traces, steps[0])
    rows: list[tuple[str, int, int | None]] = []  # (label, host, device or None for the Python row)
    for host, events in sorted(traces.items()):
        rows.append((f"host {host} Python", host, None))
        rows += [(f"host {host} device {d}", host, d) for d in sorted({e.device for e in events if e.device is not None})]
    fig = plt.figure(figsize=(_WIDTH, 0.9 + len(rows) * _ROW_H))
    ax = fig.add_subplot(1, 1, 1)
    shown_steps = {host: [s for s in step_spans(events) if s.step in steps] for host, events in traces.items()}
    lo = min(s.start_us - offsets[host] for host, shown in shown_steps.items() for s in shown)
    hi = max(s.end_us - offsets[host] for host, shown in shown_steps.items() for s in shown)
    for y, (label, host, device) in enumerate(rows):
        events, offset, shown = traces[host], offsets[host], shown_steps[host]
        window = [e for e in events if lo <= e.start_us - offset < hi]  # every host's drawn steps, lined up
        if device is None:
            for s in shown:
                ax.add_patch(Rectangle(((s.start_us - offset) / 1000, y - 0.4), s.dur_ms, 0.8, facecolor="none",
                                       edgecolor=STEP_EDGE, linewidth=1.2))
                if s.dur_us > 0.04 * (hi - lo):  # no label on a step too short to hold it (dispatch only)
                    ax.text((s.start_us - offset) / 1000 + 0.5, y, f"step {s.step}", va="center", fontsize=7)
            boxes = [e for e in window if e.thread == "python" and e.name in host_names]
        else:
            boxes = [e for e in window if e.device == device and not e.name.startswith("end:")
                     and "::" not in e.name]  # XLA ops, not the runtime's own events (ThunkExecutor::...)
        for e in boxes:
            colour = HOST_WORK if device is None else COLLECTIVE if is_collective(e.name) else COMPUTE
            ax.add_patch(Rectangle(((e.start_us - offset) / 1000, y - 0.3), max(e.dur_ms, 0.05), 0.6,
                                   facecolor=colour, edgecolor="none"))
            if device is None and e.dur_ms > 20:
                ax.text((e.start_us - offset + e.dur_us / 2) / 1000, y, e.name.lstrip("$"), ha="center",
                        va="center", fontsize=6, color="white")
    ax.set_xlim(lo / 1000 - 2, hi / 1000 + 2)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_yticks(range(len(rows)), [r[0] for r in rows], fontsize=7)
    ax.set_xlabel("ms (hosts lined up where a collective ends)", fontsize=8)
    ax.tick_params(axis="x", labelsize=7)
    fig.legend(handles=[Patch(color=COLLECTIVE, label="collective"), Patch(color=COMPUTE, label="other XLA op"),
                        Patch(color=HOST_WORK, label="host work (input, sleep)")],
               fontsize=7, loc="lower center", ncol=3, frameon=False)
    ax.set_title(title or f"steps {', '.join(map(str, steps))} on {len(traces)} hosts", fontsize=9)
    fig.tight_layout(rect=(0, 0.3 / fig.get_figheight(), 1, 1))
    plt.close(fig)
    return described(fig, f"Timeline of {ax.get_title()}: one row per host's Python thread and per device "
                          f"({len(rows)} rows), boxes for collectives, other XLA ops and host work, hosts lined "
                          "up where a collective ends.")
