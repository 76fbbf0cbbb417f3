#!/usr/bin/env python3
"""A `dssp-lab bench paradigms` folder (runs.csv, runs/*/workers.csv, accuracy.csv): per run (in run order from runs.csv):
time to targets from the timer start (bench's definition) and from the first poll at which
any worker had done an iteration; steady ms/iteration (mesh: mean of the workers' per-iteration
time over the steady part), compute and wait per iteration."""
import csv, sys, os, collections, statistics
def runs(root):
    order = []
    for r in csv.DictReader(open(os.path.join(root, "runs.csv"))):
        order.append(r)
    return order
def per_run(root, d, targets):
    p = os.path.join(root, "runs", d, "workers.csv")
    polls = collections.OrderedDict()
    for r in csv.DictReader(open(p)):
        polls.setdefault(r["elapsed_s"], {})[int(r["node"])] = r
    ts = list(polls); n = max(max(v) for v in polls.values()) + 1
    first = next(float(t) for t in ts if any(int(x["iter"]) > 0 for x in polls[t].values()))
    full = [t for t in ts if len(polls[t]) == n and all(polls[t][k]["up"] == "true" and int(polls[t][k]["iter"]) > 0 for k in range(n))]
    a, b = polls[full[0]], polls[full[-1]]
    span = float(full[-1]) - float(full[0])
    ms, cm, wt = [], [], []
    for k in range(n):
        di = int(b[k]["iter"]) - int(a[k]["iter"])
        ms.append(1000 * span / di)
        cm.append(1000 * (float(b[k]["compute_s"]) - float(a[k]["compute_s"])) / di)
        wt.append(1000 * (float(b[k]["wait_s"]) - float(a[k]["wait_s"])) / di)
    acc = list(csv.DictReader(open(os.path.join(root, "runs", d, "accuracy.csv"))))
    tt = []
    for tg in targets:
        tt.append(next((float(x["elapsed_s"]) for x in acc if float(x["accuracy"]) >= tg), None))
    return dict(first=first, ms=ms, cm=cm, wt=wt, tt=tt, final=float(acc[-1]["accuracy"]) if acc else None)
def main(root, targets=(0.95, 0.97)):
    rs = runs(root)
    res = []
    for r in rs:
        d = "%s-%s-r%s" % (r["setting"], r["paradigm"].replace(":", "_"), r["repeat"])
        if not os.path.isdir(os.path.join(root, "runs", d)):
            print("missing", d, list(r.keys())); continue
        x = per_run(root, d, targets); x["name"] = d; x["variant"] = r["paradigm"]; x["load"] = r.get("load1", "")
        res.append(x)
    f = lambda v: "-" if v is None else "%.1f" % v
    print("| run | first iter (s) | " + " | ".join("to %g%% from start / from first iter" % (100 * t) for t in targets) + " | final | mean ms/iter = compute + wait | per worker ms/iter | load |")
    for x in res:
        cols = ["%s / %s" % (f(t), f(None if t is None else t - x["first"])) for t in x["tt"]]
        print("| %s | %.1f | %s | %.4f | %.0f = %.0f + %.0f | %s | %s |" % (x["name"], x["first"], " | ".join(cols), x["final"] or 0,
              statistics.mean(x["ms"]), statistics.mean(x["cm"]), statistics.mean(x["wt"]), " ".join("%.0f" % m for m in x["ms"]), x["load"]))
    return res
def ab(root, A, B):
    """Runs in run order A,B,A,B,...: each B's steady ms/iteration over each adjacent A's (before
    and after), and the median of those ratios, which cancels a slow drift of the machine's load."""
    res = main(root, (0.95,))
    seq = [x for x in res if x["variant"] in (A, B)]
    rit = []
    print()
    print("| pair | ms/iter %s → %s | ratio | load |" % (A, B))
    for i, x in enumerate(seq):
        if x["variant"] != B:
            continue
        for j in (i - 1, i + 1):
            if 0 <= j < len(seq) and seq[j]["variant"] == A:
                ma, mb = statistics.mean(seq[j]["ms"]), statistics.mean(x["ms"])
                rit.append(mb / ma)
                print("| %s, %s | %.0f → %.0f | %.3f | %s → %s |" % (seq[j]["name"], x["name"], ma, mb, mb / ma, seq[j]["load"], x["load"]))
    print("median ratio %.3f over %d adjacent pairs (%.3f–%.3f)" % (statistics.median(rit), len(rit), min(rit), max(rit)))

if __name__ == "__main__":
    # bench-times.py FOLDER                    times from start and from the first iteration, ms/iteration
    # bench-times.py FOLDER ssp:1 ssp:1+balance  and the A/B ratios of adjacent runs
    if len(sys.argv) == 4:
        ab(*sys.argv[1:4])
    else:
        main(sys.argv[1])
