"""Exercises of notebook 00: fake devices and what a host sees."""
import os
import re

import numpy as np

from helpers.devices import DEVICE_COUNT_FLAG
from helpers.exercises import forms
from helpers.exercises.core import Kernel, Message, Mistake, describe, register, say
from helpers.exercises.kinds import ProgramExercise, ValueExercise
from helpers.exercises.rules import OutputRule, ValueRule

KERNEL = Kernel(devices=8)  # the first cell: use_fake_devices(8)
_RUN_KEYS = ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")


# ------------------------------------------------------------------ 00.1 a host's environment

def _port(num_hosts: int) -> int:
    return 12350 + num_hosts


def _what_a_process_reads(host_env, mesh) -> tuple[dict, ...]:
    """For each host of the layout, what its process makes of host_env's answer, and which host it is.

    `via` names the variable that sets a wrong device count, and `set_to` its value (None when right).
    """
    num_hosts, per_host = mesh.shape["host"], mesh.shape["device"]
    views = []
    for host in range(num_hosts):
        env = host_env(host, num_hosts, per_host, _port(num_hosts))
        if not isinstance(env, dict):
            raise Mistake(f"host_env should return a dict of environment variables, but returned {describe(env)}")
        cpu, xla = env.get("JAX_NUM_CPU_DEVICES"), str(env.get("XLA_FLAGS", ""))
        flags = re.findall(rf"{DEVICE_COUNT_FLAG}=(\S*)", xla)
        devices = cpu if cpu is not None else (flags[0] if flags else None)
        wrong = devices is not None and str(devices) != str(per_host)
        copied = "PATH" in env  # a dict(os.environ) carries PATH; a dict the learner writes does not
        views.append({
            "host": host, "hosts": num_hosts, "per_host": per_host,
            "missing": ", ".join(k for k in _RUN_KEYS if k not in env),
            "not_string": next(((k, v) for k, v in env.items() if not (isinstance(k, str) and isinstance(v, str))),
                               None),
            "platforms": None if env.get("JAX_PLATFORMS") in (None, "cpu") else env["JAX_PLATFORMS"],
            "devices": devices,
            "via": ("JAX_NUM_CPU_DEVICES" if cpu is not None else "XLA_FLAGS") if wrong else None,
            "set_to": (cpu if cpu is not None else xla) if wrong else None,
            "total": num_hosts > 1 and devices == str(num_hosts * per_host),  # the run's count, not the host's
            "conflict": next(((f, cpu) for f in flags if cpu is not None and f != cpu), None),
            "inherited": copied and cpu == os.environ.get("JAX_NUM_CPU_DEVICES"),
            "xla_inherited": (xla, flags[0]) if copied and flags and xla == os.environ.get("XLA_FLAGS") else None,
            **{k: env.get(k) for k in _RUN_KEYS},
        })
    return tuple(views)


def _family(test, message: Message, example: str) -> OutputRule:
    """A rule on the hosts' views: `test(view)` holds for some host; `message` is about the first such view."""
    def first(case):
        return next((v for v in case.got if test(v)), None)
    return OutputRule(lambda case: first(case) is not None, lambda case: say(message, first(case)), example)


def _host_env(devices: str, ids: str = "str(host_id)", port: str = "port") -> str:
    return (f"def host_env(host_id, num_hosts, devices_per_host, port):\n"
            f"    return {{{devices}'JAX_NUM_PROCESSES': str(num_hosts), 'JAX_PROCESS_ID': {ids},\n"
            f"            'JAX_COORDINATOR_ADDRESS': f'127.0.0.1:{{{port}}}'}}\n")


def _flag(count: str) -> str:
    return f"'XLA_FLAGS': f'{DEVICE_COUNT_FLAG}={{{count}}}', "


_TOTAL = ("gives each process the total device count; it sets ONE process's devices, so pass devices_per_host "
          "(JAX adds the hosts' devices up itself)")


register(ProgramExercise(
    id="00.1", kernel=KERNEL, answer_name="host_env", title="the environment of one host process",
    solution='''
def host_env(host_id, num_hosts, devices_per_host, port):
    """Environment variables for one host process of a run on this machine."""
    return {
        "JAX_NUM_CPU_DEVICES": str(devices_per_host),  # this process's devices (jax 0.12)
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices_per_host}",  # the same, older
        "JAX_PLATFORMS": "cpu",
        "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}",  # jax.distributed.initialize reads this
        "JAX_NUM_PROCESSES": str(num_hosts),  # helpers.launch.initialize passes these two on
        "JAX_PROCESS_ID": str(host_id),
    }
''',
    run=_what_a_process_reads,
    meshes=((2, 4), (3, 2), (4, 1)),
    families=(
        _family(lambda v: bool(v["missing"]),
                lambda v: f"the environment has no {v['missing']}; a host process of this course needs all of "
                          f"{', '.join(_RUN_KEYS)}",
                "def host_env(host_id, num_hosts, devices_per_host, port):\n"
                f"    return {{{_flag('devices_per_host')}}}\n"),
        _family(lambda v: v["not_string"] is not None,
                lambda v: f"environment variables are strings, but your {v['not_string'][0]!r} is "
                          f"{describe(v['not_string'][1])}: wrap numbers in str(...)",
                "def host_env(host_id, num_hosts, devices_per_host, port):\n"
                "    return {'JAX_NUM_CPU_DEVICES': devices_per_host, 'JAX_NUM_PROCESSES': num_hosts,\n"
                "            'JAX_PROCESS_ID': host_id, 'JAX_COORDINATOR_ADDRESS': f'127.0.0.1:{port}'}\n"),
        _family(lambda v: v["platforms"] not in (None, ""),
                lambda v: f"with JAX_PLATFORMS={v['platforms']!r} each process asks JAX for that backend, and fails "
                          "to start where there is none (JAX raises 'Unable to initialize backend'). The course's "
                          "processes run on the CPU, where the fake devices are: set it to 'cpu'",
                _host_env(_flag("devices_per_host") + "'JAX_PLATFORMS': 'gpu', ")),
        _family(lambda v: v["platforms"] == "",
                "JAX_PLATFORMS='' lets JAX pick any backend, a GPU where there is one, and the course's fake "
                "devices are CPU devices: set it to 'cpu'",
                _host_env(_flag("devices_per_host") + "'JAX_PLATFORMS': '', ")),
        _family(lambda v: v["devices"] is None,
                "the environment does not give the process its devices: set JAX_NUM_CPU_DEVICES (or "
                f"XLA_FLAGS='{DEVICE_COUNT_FLAG}=N') to this host's device count", _host_env("")),
        _family(lambda v: v["via"] == "JAX_NUM_CPU_DEVICES" and v["inherited"],
                lambda v: f"your environment carries JAX_NUM_CPU_DEVICES={v['devices']!r}, inherited from this "
                          "notebook's os.environ (use_fake_devices set it for the notebook's own devices). It wins "
                          f"over XLA_FLAGS, so each process would get {v['devices']} devices: set it to "
                          f"devices_per_host ({v['per_host']} here), or remove it",
                "import os\n" + _host_env("**os.environ, " + _flag("devices_per_host"))),
        _family(lambda v: v["via"] == "JAX_NUM_CPU_DEVICES" and v["total"], f"JAX_NUM_CPU_DEVICES {_TOTAL}",
                _host_env("'JAX_NUM_CPU_DEVICES': str(num_hosts * devices_per_host), ")),
        _family(lambda v: v["via"] == "JAX_NUM_CPU_DEVICES",
                lambda v: f"for {v['per_host']} devices per host, JAX_NUM_CPU_DEVICES should be "
                          f"{str(v['per_host'])!r}, not {v['devices']!r}",
                _host_env("'JAX_NUM_CPU_DEVICES': '3', ")),
        _family(lambda v: v["xla_inherited"] and (v["conflict"] is not None or v["via"] == "XLA_FLAGS"),
                lambda v: "your dict carries this notebook's XLA_FLAGS, {!r} (copied from os.environ?), which asks "
                          "for {} devices".format(*v["xla_inherited"])
                          + (": JAX_NUM_CPU_DEVICES would win, but two settings that disagree are a trap"
                             if v["conflict"] else f", not devices_per_host ({v['per_host']} here)")
                          + "; overwrite XLA_FLAGS too, or remove it",
                "import os\n" + _host_env("**os.environ, 'JAX_NUM_CPU_DEVICES': str(devices_per_host), ")),
        _family(lambda v: v["conflict"] is not None,
                lambda v: f"XLA_FLAGS asks for {v['conflict'][0]} devices and JAX_NUM_CPU_DEVICES for "
                          f"{v['conflict'][1]}: JAX_NUM_CPU_DEVICES would win, but two settings that disagree "
                          "are a trap for whoever reads them; make both devices_per_host, or set only one",
                _host_env("'JAX_NUM_CPU_DEVICES': str(devices_per_host), " + _flag("num_hosts * devices_per_host"))),
        _family(lambda v: v["via"] == "XLA_FLAGS" and v["total"], f"XLA_FLAGS {_TOTAL}",
                _host_env(_flag("num_hosts * devices_per_host"))),
        _family(lambda v: v["via"] == "XLA_FLAGS",
                lambda v: f"for {v['per_host']} devices per host, XLA_FLAGS should hold "
                          f"'{DEVICE_COUNT_FLAG}={v['per_host']}', not {v['set_to']!r}",
                _host_env(_flag("3 * devices_per_host"))),
        _family(lambda v: v["JAX_NUM_PROCESSES"] != str(v["hosts"]),
                "JAX_NUM_PROCESSES is the number of processes (hosts) in the run: num_hosts",
                _host_env(_flag("devices_per_host")).replace("str(num_hosts)", "str(devices_per_host)")),
        _family(lambda v: v["JAX_PROCESS_ID"] != str(v["host"]),
                "JAX_PROCESS_ID must be this host's own id, counted from 0: host_id",
                _host_env(_flag("devices_per_host"), ids="str(host_id + 1)")),
        _family(lambda v: v["JAX_COORDINATOR_ADDRESS"] == f"localhost:{_port(v['hosts'])}",
                "localhost is a name that each machine looks up, and many resolve it to the IPv6 address ::1 "
                "before 127.0.0.1; the course's launcher names the loopback address itself. Write "
                "'127.0.0.1:{port}', as the prompt asks",
                _host_env(_flag("devices_per_host"), port="port").replace("127.0.0.1", "localhost")),
        _family(lambda v: v["JAX_COORDINATOR_ADDRESS"] != f"127.0.0.1:{_port(v['hosts'])}",
                lambda v: "every host must name the same coordinator, process 0 on this machine's loopback "
                          f"address: '127.0.0.1:{{port}}', here '127.0.0.1:{_port(v['hosts'])}'",
                _host_env(_flag("devices_per_host"), port="port + host_id")),
    ),
    hints=(
        "Each process is started separately, so its JAX_NUM_CPU_DEVICES (or XLA_FLAGS) only describes "
        "the devices of that one process.",
        "Process ids count from 0, and every process must name the same coordinator: process 0's address.",
        "If you start from dict(os.environ), you also copy this notebook's JAX_NUM_CPU_DEVICES: overwrite it.",
    ),
))


# ------------------------------------------------------------------ 00.2 a global count where a per-host one belongs

HOSTS, PER_HOST, BATCH = 2, 4, 64


def _what_the_hosts_take() -> tuple[int, int, int]:
    """(host 1's first row, its last row, rows no host takes) on 2 hosts x 4 devices."""
    batch = np.arange(BATCH)
    taken = [batch.reshape(HOSTS * PER_HOST, -1)[host] for host in range(HOSTS)]  # the notebook's buggy line
    return int(taken[1][0]), int(taken[1][-1]), BATCH - len(set(np.concatenate(taken).tolist()))


register(ValueExercise(
    id="00.2", kernel=KERNEL, answer_name="host1_rows",
    title="a global count where a per-host one belongs: which rows each host takes",
    solution="host1_rows = (8, 15, 48)  # reshape(8, -1): 8 blocks of 8 rows; the 2 hosts take blocks 0 and 1",
    form=forms.ints(3, like="(0, 7, 0)", what="(host 1's first row, its last row, rows no host takes)"),
    right=_what_the_hosts_take,
    wrong={
        (32, 63, 0): "that is what the line was meant to do: split the batch into one block per host. It splits it "
                     "into one block per device of the whole run, jax.device_count(), and each host takes one block",
        (4, 7, 56): "jax.device_count() counts the devices of every host (8 here), not this host's 4",
        (16, 31, 32): "jax.device_count() is 8, so reshape(8, -1) makes 8 blocks of 8 rows, not 4 of 16",
    },
    rules=(
        ValueRule(lambda v: v[1] - v[0] + 1 != BATCH // (HOSTS * PER_HOST), example=(8, 16, 48),
             say="reshape(jax.device_count(), -1) makes blocks of 64 / 8 = 8 rows; first and last are both "
                 "included"),
        ValueRule(lambda v: v[0] != 8, example=(0, 7, 48),
             say="host 1 takes block jax.process_index() = 1, counted from 0"),
    ),
    otherwise="host 1's rows are right, but count again how many rows the 2 hosts leave out",
    hints=(
        "Two hosts run the same line. On each, jax.device_count() counts the devices of the whole run and "
        "jax.process_index() is the host's own index.",
        "reshape(8, -1) makes 8 blocks of 8 rows; host h takes block h. How many rows are in the blocks nobody "
        "takes?",
    ),
))
