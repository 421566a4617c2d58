"""Summarizes Nsight Compute's CSV of a few inferences (gpu-profile.sh with NCU_CSV): the last
inference's kernels (the longest tail that repeats the kernels just before it: the first run also
times algorithm candidates) in launch order with duration, grid and block, then the sum per kernel
name, and the total. Usage: kernel_times.py FILE.csv"""
import collections
import csv
import io
import re
import sys

UNITS = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
         "second": 1e6, "s": 1e6}


def short(name):
    """A kernel's name without its template arguments and parameter list."""
    name = re.sub(r"\(.*$", "", name.replace("(anonymous namespace)::", ""))
    depth, out = 0, []
    for c in name:
        depth += c == "<"
        if depth == 0:
            out.append(c)
        depth -= c == ">"
    return "".join(out).replace("void ", "")[:90]


def main(path):
    text = open(path, errors="replace").read()
    start = text.find('"ID","Process ID"')
    if start < 0:
        sys.exit(f"{path}: no Nsight Compute CSV table in it:\n{text[-2000:]}")
    kernels = collections.OrderedDict()
    for row in csv.DictReader(io.StringIO(text[start:])):
        if not row.get("ID", "").isdigit():
            continue
        k = kernels.setdefault(int(row["ID"]), {"name": short(row["Kernel Name"])})
        metric, value = row["Metric Name"], row["Metric Value"].replace(",", "")
        if metric == "gpu__time_duration.sum":
            k["us"] = float(value) * UNITS.get(row["Metric Unit"], 1.0)
        elif metric == "launch__grid_size":
            k["grid"] = int(float(value))
        elif metric == "launch__block_size":
            k["block"] = int(float(value))
    ids = list(kernels)
    names = [kernels[i]["name"] for i in ids]
    period = next((p for p in range(len(names) // 2, 0, -1) if names[-p:] == names[-2 * p:-p]),
                  len(names))
    kernels = collections.OrderedDict((i, kernels[i]) for i in ids[-period:])
    total = sum(k.get("us", 0.0) for k in kernels.values())
    print(f"{len(kernels)} kernels in the last inference (of {len(ids)} profiled), "
          f"{total:.1f} us of device time\n")
    print("| # | kernel | grid | block | us |\n|---|---|---|---|---|")
    for i, k in kernels.items():
        print(f"| {i} | {k['name']} | {k.get('grid', '?')} | {k.get('block', '?')} | "
              f"{k.get('us', 0.0):.2f} |")
    by_name = collections.defaultdict(lambda: [0, 0.0])
    for k in kernels.values():
        by_name[k["name"]][0] += 1
        by_name[k["name"]][1] += k.get("us", 0.0)
    print("\n| kernel | launches | us | share |\n|---|---|---|---|")
    for name, (n, us) in sorted(by_name.items(), key=lambda kv: -kv[1][1]):
        print(f"| {name} | {n} | {us:.1f} | {100 * us / total:.0f}% |")


if __name__ == "__main__":
    main(sys.argv[1])
