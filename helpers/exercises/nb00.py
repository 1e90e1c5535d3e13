"""Exercises of notebook 00: fake devices and what a host sees."""
import os
import re

from helpers.devices import DEVICE_COUNT_FLAG
from helpers.exercises import forms
from helpers.exercises.core import Kernel, Message, Mistake, describe, register, say
from helpers.exercises.kinds import ProgramExercise, Rule, ValueExercise

KERNEL = Kernel(devices=8)  # the first cell: use_fake_devices(8)
_RUN_KEYS = ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")


# ------------------------------------------------------------------ 00.1 a host's environment

def _port(num_hosts: int) -> int:
    return 12350 + num_hosts


def _what_a_process_reads(host_env, mesh) -> tuple[dict, ...]:
    """For each host of the layout, what its process makes of host_env's answer.

    `via` names the variable (and its value) that sets a wrong device count; None when it is right.
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
        via = None
        if devices is not None and str(devices) != str(per_host):
            via = ("JAX_NUM_CPU_DEVICES", cpu) if cpu is not None else ("XLA_FLAGS", xla)
        views.append({
            "missing": ", ".join(k for k in _RUN_KEYS if k not in env),
            "strings": all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()),
            "devices": devices, "via": via,
            "conflict": next(((f, cpu) for f in flags if cpu is not None and f != cpu), None),
            "inherited": "PATH" in env and cpu == os.environ.get("JAX_NUM_CPU_DEVICES"),
            **{k: env.get(k) for k in _RUN_KEYS},
        })
    return tuple(views)


def _family(test, message: Message, example: str) -> Rule:
    """A rule on the hosts' views: `test(view, host, num_hosts, per_host)`; `message` gets the same."""
    def first(case):
        return next(((v, h) for h, v in enumerate(case.got) if test(v, h, *case.layout)), None)
    return Rule(lambda case: first(case) is not None,
                lambda case: say(message, *first(case), *case.layout), example)


def _host_env(devices: str, ids: str = "str(host_id)", port: str = "port") -> str:
    return (f"def host_env(host_id, num_hosts, devices_per_host, port):\n"
            f"    return {{{devices}'JAX_NUM_PROCESSES': str(num_hosts), 'JAX_PROCESS_ID': {ids},\n"
            f"            'JAX_COORDINATOR_ADDRESS': f'127.0.0.1:{{{port}}}'}}\n")


def _flag(count: str) -> str:
    return f"'XLA_FLAGS': f'{DEVICE_COUNT_FLAG}={{{count}}}', "


_TOTAL = ("gives each process the total device count; it sets ONE process's devices, so pass devices_per_host "
          "(JAX adds the hosts' devices up itself)")


def _via(name):
    return lambda v, h, hosts, per_host: v["via"] is not None and v["via"][0] == name


def _total(name):
    return lambda v, h, hosts, per_host: _via(name)(v, h, hosts, per_host) and hosts > 1 \
        and v["devices"] == str(hosts * per_host)


register(ProgramExercise(
    id="00.1", kernel=KERNEL,
    title="the environment of one host process",
    answer_name="host_env",
    solution='''
def host_env(host_id, num_hosts, devices_per_host, port):
    """Environment variables for one host process of a run on this machine."""
    return {
        "JAX_NUM_CPU_DEVICES": str(devices_per_host),  # this process's devices (jax 0.10.2)
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
        _family(lambda v, *_: bool(v["missing"]),
                lambda v, *_: f"the environment has no {v['missing']}; a host process of this course needs all "
                              f"of {', '.join(_RUN_KEYS)}",
                f"def host_env(host_id, num_hosts, devices_per_host, port):\n    return {{{_flag('devices_per_host')}}}\n"),
        _family(lambda v, *_: not v["strings"], "environment variables are strings: wrap numbers in str(...)",
                "def host_env(host_id, num_hosts, devices_per_host, port):\n"
                "    return {'JAX_NUM_CPU_DEVICES': devices_per_host, 'JAX_NUM_PROCESSES': num_hosts,\n"
                "            'JAX_PROCESS_ID': host_id, 'JAX_COORDINATOR_ADDRESS': f'127.0.0.1:{port}'}\n"),
        _family(lambda v, *_: v["devices"] is None,
                "the environment does not give the process its devices: set JAX_NUM_CPU_DEVICES (or "
                f"XLA_FLAGS='{DEVICE_COUNT_FLAG}=N') to this host's device count", _host_env("")),
        _family(lambda v, *a: _via("JAX_NUM_CPU_DEVICES")(v, *a) and v["inherited"],
                lambda v, h, hosts, per_host: (
                    f"your environment carries JAX_NUM_CPU_DEVICES={v['devices']!r}, inherited from this notebook's "
                    "os.environ (use_fake_devices set it for the notebook's own devices). It wins over XLA_FLAGS, "
                    f"so each process would get {v['devices']} devices: set it to devices_per_host ({per_host} "
                    "here), or remove it"),
                "import os\n" + _host_env("**os.environ, " + _flag("devices_per_host"))),
        _family(_total("JAX_NUM_CPU_DEVICES"), f"JAX_NUM_CPU_DEVICES {_TOTAL}",
                _host_env("'JAX_NUM_CPU_DEVICES': str(num_hosts * devices_per_host), ")),
        _family(_via("JAX_NUM_CPU_DEVICES"),
                lambda v, h, hosts, per_host: f"for {per_host} devices per host, JAX_NUM_CPU_DEVICES should be "
                                              f"{str(per_host)!r}, not {v['devices']!r}",
                _host_env("'JAX_NUM_CPU_DEVICES': '3', ")),
        _family(lambda v, *_: v["conflict"] is not None,
                lambda v, *_: f"XLA_FLAGS asks for {v['conflict'][0]} devices and JAX_NUM_CPU_DEVICES for "
                              f"{v['conflict'][1]}: JAX_NUM_CPU_DEVICES would win, but two settings that disagree "
                              "are a trap for whoever reads them; make both devices_per_host, or set only one",
                _host_env("'JAX_NUM_CPU_DEVICES': str(devices_per_host), " + _flag("num_hosts * devices_per_host"))),
        _family(_total("XLA_FLAGS"), f"XLA_FLAGS {_TOTAL}", _host_env(_flag("num_hosts * devices_per_host"))),
        _family(_via("XLA_FLAGS"),
                lambda v, h, hosts, per_host: f"for {per_host} devices per host, XLA_FLAGS should hold "
                                              f"'{DEVICE_COUNT_FLAG}={per_host}', not {v['via'][1]!r}",
                _host_env(_flag("3 * devices_per_host"))),
        _family(lambda v, h, hosts, per_host: v["JAX_NUM_PROCESSES"] != str(hosts),
                "JAX_NUM_PROCESSES is the number of processes (hosts) in the run: num_hosts",
                _host_env(_flag("devices_per_host")).replace("str(num_hosts)", "str(devices_per_host)")),
        _family(lambda v, h, *_: v["JAX_PROCESS_ID"] != str(h),
                "JAX_PROCESS_ID must be this host's own id, counted from 0: host_id",
                _host_env(_flag("devices_per_host"), ids="str(host_id + 1)")),
        _family(lambda v, h, hosts, per_host: v["JAX_COORDINATOR_ADDRESS"] != f"127.0.0.1:{_port(hosts)}",
                lambda v, h, hosts, per_host: "every host must name the same coordinator, process 0 on this "
                                              "machine's loopback address: '127.0.0.1:{port}', here "
                                              f"'127.0.0.1:{_port(hosts)}'",
                _host_env(_flag("devices_per_host"), port="port + host_id")),
    ),
    hints=(
        "Each process is started separately, so its JAX_NUM_CPU_DEVICES (or XLA_FLAGS) only describes "
        "the devices of that one process.",
        "Process ids count from 0, and every process must name the same coordinator: process 0's address.",
        "If you start from dict(os.environ), you also copy this notebook's JAX_NUM_CPU_DEVICES: overwrite it.",
    ),
))


# ------------------------------------------------------------------ 00.2 what the last host sees

# 4 hosts x 2 devices, the last host: the notebook's real run is 2 x 4, so it shows the
# pattern without giving this answer away.
HOSTS, PER_HOST = 4, 2

register(ValueExercise(
    id="00.2", kernel=KERNEL,
    title="what the last host of a 4 x 2 run sees",
    answer_name="last_host_view",
    solution="last_host_view = (8, 2, 4, 3)  # device_count, local_device_count, process_count, process_index",
    form=forms.ints(4, like="(1, 2, 3, 4)", lists=False),
    right=lambda: (HOSTS * PER_HOST, PER_HOST, HOSTS, HOSTS - 1),
    wrong={(8, 4, 2, 1): "that is what host 1 of the 2 x 4 run sees; this run has 4 hosts of 2 devices each"},
    rules=(
        Rule(lambda v: v[0] == PER_HOST, example=(2, 2, 4, 3),
             say="jax.device_count() counts the devices of ALL hosts (4 x 2), not just this host's"),
        Rule(lambda v: v[1] == HOSTS * PER_HOST, example=(8, 8, 4, 3),
             say="jax.local_device_count() counts only the devices this process drives: 2"),
        Rule(lambda v: v[2] != HOSTS, example=(8, 2, 1, 3),
             say="jax.process_count() is the number of processes in the run: one per host, so 4"),
        Rule(lambda v: v[3] == HOSTS, example=(8, 2, 4, 4),
             say="process indices count from 0: the last of 4 hosts is process 3"),
        Rule(lambda v: v[3] == 0, example=(8, 2, 4, 0),
             say="0 is the first host's index; the last of 4 hosts is process 3"),
    ),
    otherwise=lambda v: f"not quite: {v} is not what the last host sees; recount each of the four",
    hints=(
        "'local' means this process's own devices; the unqualified counts cover the whole run.",
        "There are 4 processes with 2 devices each, and indices start at 0.",
    ),
))
