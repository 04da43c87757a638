#!/usr/bin/env python3
"""Cut a `condisagg matrix --json-out` file down to some workloads, fleets and objectives.

The result can be given to `condisagg matrix --baselines` for a run of only those cells: the
flags that define the matrix are rewritten to the subset, so the run's flags match them.

usage: matrix_subset.py IN OUT WORKLOADS FLEETS SLOS   (comma lists, SLOS as 2s/100ms,...)
"""
import json
import sys


def slo_name(s):
    ttft, tpot = s.split("/")
    return f"ttft={ttft},tpot={tpot}"


def main():
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    src, dst, workloads, fleets, slos = sys.argv[1:]
    with open(src) as f:
        run = json.load(f)
    w, fl, sl = workloads.split(","), fleets.split(","), [slo_name(s) for s in slos.split(",")]
    run["cells"] = [c for c in run["cells"] if c["Workload"] in w and c["Fleet"] in fl and c["SLO"] in sl]
    if not run["cells"]:
        sys.exit(f"{src}: no cell of {workloads} / {fleets} / {slos}")
    run["flags"].update({"workloads": workloads, "fleets": fleets, "slos": slos})
    with open(dst, "w") as f:
        json.dump(run, f, indent=2)
    print(f"{len(run['cells'])} cells")


if __name__ == "__main__":
    main()
