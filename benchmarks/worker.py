"""Subprocess entry of `measure.run_worker`: run one measuring function with its own devices.

    python -m benchmarks.worker benchmarks.train_step:worker --devices 8 --args '{...}' --out F

The function returns (pyperf benchmarks, facts): the benchmarks go to the pyperf suite file F,
the facts to one stdout line `RESULT {json}`. An AssertionError (a measured program computed
the wrong thing) becomes one line `WRONG {message}` and exit status 3.
"""
import argparse
import importlib
import json
import sys

import pyperf


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.worker")
    parser.add_argument("target", help="module:function")
    parser.add_argument("--devices", type=int, required=True)
    parser.add_argument("--args", default="{}")
    parser.add_argument("--out", required=True)
    opts = parser.parse_args(argv)

    from helpers.devices import use_fake_devices

    use_fake_devices(opts.devices)  # before anything imports JAX
    module, _, function = opts.target.partition(":")
    try:
        benchmarks, facts = getattr(importlib.import_module(module), function)(
            **json.loads(opts.args))
    except AssertionError as err:
        print("WRONG " + " ".join(str(err).split()), flush=True)
        return 3
    if benchmarks:
        pyperf.BenchmarkSuite(benchmarks).dump(opts.out, replace=True)
    print("RESULT " + json.dumps(facts), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
