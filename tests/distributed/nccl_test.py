#!/usr/bin/env python3
"""Distributed tests on the simulated GPU and NCCL: several processes on one
machine started by scripts/launch-ranks. One case per invocation:
nccl_test.py --build DIR --case NAME.

rendezvous  the simulated libnccl.so.2 alone: a late rank makes the others'
            collectives end when its own ends (ground truth, SIMGPU_TRACE)
interpose   every NCCL entry point called by tests/distributed/nccl_probe,
            through the PLT and through dlsym, forwarded and recorded with the
            right communicator, rank, sequence number and bytes
ddp         examples/ddp_train with 4 ranks and one slow rank under
            `stallscope run --sim`: rank-named traces, one NCCL record per
            collective per rank with equal sequence numbers, and each
            collective ending at the same time on every rank"""
import collections
import glob
import json
import math
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from ground_truth import union_in  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAUNCH = os.path.join(ROOT, "scripts", "launch-ranks")
LATENCY_NS = 10_000  # SIMGPU_NCCL_LATENCY_US default
GBPS = 10.0          # SIMGPU_NCCL_GBPS default: bytes per ns


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import checks  # noqa: E402
from checks import SKIP, Failure, check  # noqa: E402


def run(cmd, env, timeout=180):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise Failure(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-1500:]}\n{p.stderr[-3000:]}")
    return p


def truth_ops(work):
    """Ground-truth NCCL ops of every rank: {(comm, seq): {rank: op}}."""
    files = glob.glob(os.path.join(work, "truth-*.jsonl"))
    by = collections.defaultdict(dict)
    for path in files:
        with open(path) as f:
            for line in f:
                op = json.loads(line)
                if op["kind"] == "nccl":
                    check(op["rank"] not in by[(op["comm"], op["seq"], op["name"])],
                          f"two ops of rank {op['rank']} for one instance: {op}")
                    by[(op["comm"], op["seq"], op["name"])][op["rank"]] = op
    return files, by


def dump(build, path):
    p = run([os.path.join(build, "bin", "stallscope"), "dump", path], dict(os.environ))
    rank, nccl, calls = None, [], {}
    for line in p.stdout.splitlines():
        if line.startswith("rank "):
            f = line.split()
            rank = {f[i]: f[i + 1] for i in range(0, len(f) - 1, 2)}
        elif line.startswith("nccl "):
            f = line.split()
            rec = {"kind": f[1]}
            rec.update({f[i]: f[i + 1] for i in range(2, len(f) - 1, 2)})
            nccl.append(rec)
        elif line.startswith("call "):
            f = line.split()
            calls[int(f[1])] = line
    return rank, nccl, calls


# ---- rendezvous ---------------------------------------------------------------
def case_rendezvous(build, work):
    probe = os.path.join(build, "bin", "nccl_probe")
    if not os.path.exists(probe):
        return SKIP
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.path.join(build, "lib", "simgpu")
    env["SIMGPU_TRACE"] = os.path.join(work, "truth-%p.jsonl")
    late_rank, late_us, iters, world = 1, 4000, 4, 3
    run([sys.executable, LAUNCH, "-n", str(world), "--", probe, "--iters", str(iters),
         "--late-rank", str(late_rank), "--late-us", str(late_us)], env)
    files, by = truth_ops(work)
    check(len(files) == world, f"expected {world} ground-truth files, got {files}")
    all_reduce = [(k, v) for k, v in by.items() if "AllReduce" in k[2] and len(v) == world]
    all_reduce.sort(key=lambda kv: min(op["start_ns"] for op in kv[1].values()))
    check(len(all_reduce) >= iters, f"expected {iters} all-reduces on 3 ranks, got {len(all_reduce)}")
    waits, arrivers = [], []
    for (comm, seq, name), ops in all_reduce[:iters]:
        starts = {r: op["start_ns"] for r, op in ops.items()}
        ends = {op["end_ns"] for op in ops.values()}
        last = max(starts.values())
        # Every rank ends at the same instant: the last arrival plus the
        # transfer time of its bytes.
        check(len(ends) == 1, f"seq {seq}: end times differ across ranks: {sorted(ends)}")
        expected = last + LATENCY_NS + int((1 << 20) * 4 / GBPS)
        check(abs(ends.pop() - expected) <= 1,
              f"seq {seq}: end {ops[0]['end_ns']} != last arrival + duration {expected}")
        # Who arrived last is what the machine made of the late rank's sleep:
        # on a loaded machine another rank can be delayed more. Printed, not
        # assumed; the rendezvous rule above is checked against whoever did.
        arrivers.append(max(starts, key=starts.get))
        waits.append(min(last - s for r, s in starts.items() if s != last) if len(set(starts.values())) > 1 else 0)
    print(f"rendezvous: last arrivers {arrivers} (rank {late_rank} sleeps {late_us} us); "
          f"the others waited {[w // 1000 for w in waits]} us")
    # A ground-truth op's start is its arrival: each rank's op starts after the
    # previous op on its stream ended (stream order) and its end is not
    # before its start.
    for key, ops in by.items():
        for op in ops.values():
            check(op["end_ns"] >= op["start_ns"], f"{key}: end before start")
    # p2p in a group: one SendRecv op per rank, ending together.
    sendrecv = [v for k, v in by.items() if k[2] == "ncclDevKernel_SendRecv"]
    check(len(sendrecv) == 1 and len(sendrecv[0]) == world,
          f"expected one grouped send/recv op per rank, got {sendrecv}")
    check(len({op["end_ns"] for op in sendrecv[0].values()}) == 1,
          "grouped send/recv ends differ across ranks")
    # The split communicators (ranks 0, 2 and rank 1 alone) each ran one all-reduce.
    split = [v for k, v in by.items() if "AllReduce" in k[2] and len(v) < world]
    check(sorted(len(v) for v in split) == [1, 2], f"split all-reduces: {split}")
    return 0


# ---- interpose ----------------------------------------------------------------
EXPECTED_APIS = ["ncclCommInitRank", "pncclCommInitRankConfig", "ncclAllReduce", "ncclBroadcast",
                 "ncclBcast", "ncclReduce", "ncclAllGather", "ncclReduceScatter", "ncclAlltoAll",
                 "ncclGroupStart", "ncclSend", "ncclRecv", "ncclGroupEnd", "pncclAllReduce",
                 "ncclCommSplit", "ncclCommInitAll", "ncclCommDestroy", "ncclCommFinalize",
                 "ncclCommAbort"]
N = 1 << 20


def interpose_once(build, work, world, mode_args):
    out = os.path.join(work, "trace")
    env = dict(os.environ)
    env["SIMGPU_TRACE"] = os.path.join(work, "truth-%p.jsonl")
    probe = os.path.join(build, "bin", "nccl_probe")
    run([os.path.join(build, "bin", "stallscope"), "run", "--sim", "--out", out, "--",
         sys.executable, LAUNCH, "-n", str(world), "--", probe, "--iters", "2"] + mode_args, env)
    traces = sorted(glob.glob(os.path.join(out, "*.sstrace")))
    check(len(traces) == world, f"expected {world} traces, got {traces}")
    _, truth = truth_ops(work)
    truth_comms = {k[0] for k in truth}
    per_rank = {}
    for path in traces:
        rank, nccl, calls = dump(build, path)
        check(rank is not None, f"{path}: no rank record")
        r = int(rank["rank"])
        check(re.search(rf"/rank{r:05d}\.{r}-", path), f"{path}: name does not carry rank {r}")
        check(rank["world_size"] == str(world), f"{path}: world_size {rank['world_size']}")
        apis = [n["api"] for n in nccl]
        for name in EXPECTED_APIS:
            check(name in apis, f"rank {r}: {name} not recorded; recorded {sorted(set(apis))}")
        for n in nccl:
            check(n["call"] != "-1", f"rank {r}: NCCL record not joined to a call: {n}")
        per_rank[r] = nccl
    # Communicator A (ncclCommInitRank): the same id on every rank, equal to
    # the simulator's; every collective on it has the same sequence number on
    # every rank, counted from 0 in call order.
    size = {"5": 2, "7": 4, "0": 1, "6": 2, "8": 8, "2": 4, "4": 8}
    for r, nccl in per_rank.items():
        init = [n for n in nccl if n["api"] == "ncclCommInitRank"][0]
        check(init["rank"] == str(r) and init["nranks"] == str(world), f"rank {r}: init {init}")
        comm_a = init["comm"]
        check(int(comm_a, 16) in truth_comms,
              f"rank {r}: communicator {comm_a} not in the ground truth's {truth_comms}")
        coll = [n for n in nccl if n["comm"] == comm_a and int(n["flags"], 16) & 1]
        check([int(n["seq"]) for n in coll] == list(range(len(coll))),
              f"rank {r}: sequence numbers on A: {[n['seq'] for n in coll]}")
        # --iters all-reduces, 6 other collectives, 4 of the data checks.
        check(len(coll) == 2 + 6 + 4, f"rank {r}: {len(coll)} collectives on A, expected 12")
        for n in coll:
            check(int(n["bytes"]) == int(n["count"]) * size[n["datatype"]],
                  f"rank {r}: bytes {n['bytes']} != count x size for {n}")
            check(n["rank"] == str(r), f"rank {r}: record says rank {n['rank']}")
        # Grouped p2p: no correlation inside the group, one at its end.
        send = [n for n in nccl if n["api"] == "ncclSend"][0]
        recv = [n for n in nccl if n["api"] == "ncclRecv"][0]
        end = [n for n in nccl if n["api"] == "ncclGroupEnd"][0]
        check(send["peer"] == str((r + 1) % world) and recv["peer"] == str((r - 1) % world),
              f"rank {r}: peers {send['peer']} {recv['peer']}")
        check(send["corr"] == "0" and recv["corr"] == "0" and end["corr"] != "0",
              f"rank {r}: correlation ids {send['corr']} {recv['corr']} {end['corr']}")
        check(send["group_depth"] == "1" and int(send["flags"], 16) & 4, f"rank {r}: {send}")
        split = [n for n in nccl if n["api"] == "ncclCommSplit"][0]
        check(split["rank"] == str(r // 2) and split["nranks"] == str((world + 1 - r % 2) // 2),
              f"rank {r}: split gave rank {split['rank']} of {split['nranks']}")
    # The same collective instance has the same (comm, seq) on every rank.
    keys = [sorted((n["comm"], n["seq"], n["api"].lstrip("p")) for n in nccl if int(n["flags"], 16) & 1
                   and n["api"] not in ("ncclCommSplit",) and n["nranks"] == str(world))
            for nccl in per_rank.values()]
    check(all(k == keys[0] for k in keys), "collective instances differ across ranks")


def case_interpose(build, work):
    if not os.path.exists(os.path.join(build, "bin", "nccl_probe")):
        return SKIP
    for mode in ([], ["--dlsym"]):
        sub = os.path.join(work, "dlsym" if mode else "plt")
        os.makedirs(sub)
        try:
            interpose_once(build, sub, 3, mode)
        except Failure as e:
            raise Failure(f"{'dlsym' if mode else 'PLT'} path: {e}")
    return 0


# ---- ddp -----------------------------------------------------------------------
def case_ddp(build, work):
    ddp = os.path.join(build, "bin", "ddp_train")
    if not os.path.exists(ddp):
        return SKIP
    world, steps, buckets, slow_rank, slow_us = 4, 8, 2, 2, 3000
    out = os.path.join(work, "trace")
    env = dict(os.environ)
    env["SIMGPU_TRACE"] = os.path.join(work, "truth-%p.jsonl")
    env["SIMGPU_KERNEL_US"] = "*gemm_fwd*=400,*gemm_bwd*=300,*=20"
    run([os.path.join(build, "bin", "stallscope"), "run", "--sim", "--out", out, "--",
         LAUNCH, "-n", str(world), "--", ddp, "--steps", str(steps), "--buckets", str(buckets),
         "--grad-bytes", str(2 << 20), "--slow-rank", str(slow_rank), "--slow-us", str(slow_us)],
        env)
    traces = sorted(glob.glob(os.path.join(out, "*.sstrace")))
    check(len(traces) == world, f"expected {world} rank-named traces, got {traces}")
    instances = {}
    for path in traces:
        rank, nccl, _ = dump(build, path)
        r = int(rank["rank"])
        check(os.path.basename(path).startswith(f"rank{r:05d}."), f"{path}: not named by rank {r}")
        coll = [n for n in nccl if int(n["flags"], 16) & 1]
        # One broadcast, then steps x buckets all-reduces.
        check(len(coll) == 1 + steps * buckets,
              f"rank {r}: {len(coll)} collective records, expected {1 + steps * buckets}")
        instances[r] = [(n["comm"], n["seq"], n["kind"]) for n in coll]
    check(all(v == instances[0] for v in instances.values()),
          "ranks disagree on (communicator, sequence number) of their collectives")
    files, by = truth_ops(work)
    check(len(files) == world, f"expected {world} ground-truth files, got {len(files)}")
    check(len(by) == 1 + steps * buckets, f"{len(by)} collective instances in the ground truth")
    late = collections.Counter()
    for key, ops in by.items():
        check(len(ops) == world, f"{key}: ops of ranks {sorted(ops)} only")
        ends = [op["end_ns"] for op in ops.values()]
        check(max(ends) - min(ends) <= 1000, f"{key}: end times spread {max(ends) - min(ends)} ns")
        starts = {r: op["start_ns"] for r, op in ops.items()}
        late[max(starts, key=starts.get)] += 1
    # Who arrived last is what the machine made of the slow rank's 3 ms (a
    # loaded host delays the others too): told, not required; the straggler
    # cases check the analyzer's answer against it.
    print(f"ddp: last arrivers {dict(late)} (rank {slow_rank} slowed by {slow_us} us a step)")
    return 0


def run_ddp(build, work, world, steps, slow_args):
    """4 ranks of ddp_train under `stallscope run --sim`; returns the JSON
    report over the folder and the ground truth's NCCL ops."""
    ddp = os.path.join(build, "bin", "ddp_train")
    out = os.path.join(work, "trace")
    env = dict(os.environ)
    env["SIMGPU_TRACE"] = os.path.join(work, "truth-%p.jsonl")
    env["SIMGPU_KERNEL_US"] = "*gemm_fwd*=400,*gemm_bwd*=300,*=20"
    run([os.path.join(build, "bin", "stallscope"), "run", "--sim", "-q", "--out", out, "--",
         LAUNCH, "-n", str(world), "--", ddp, "--steps", str(steps), "--buckets", "2",
         "--grad-bytes", str(2 << 20)] + slow_args, env)
    rep = run([os.path.join(build, "bin", "stallscope"), "report", out, "--format", "json"], env)
    checks.check_folder_one_at_a_time(os.path.join(build, "bin", "stallscope"), out, rep.stdout, env)
    report = json.loads(rep.stdout)
    _, by = truth_ops(work)
    return report, by


def audit_stragglers(build, work):
    """`stallscope audit` of the run's folder against a budget allowing no
    straggler: (exit code, stdout)."""
    budget = os.path.join(work, "budget.toml")
    with open(budget, "w") as f:
        f.write("max_stragglers = 0\n")
    p = subprocess.run([os.path.join(build, "bin", "stallscope"), "audit", os.path.join(work, "trace"),
                        "--budget", budget], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr


def truth_waits(by, ranks):
    """From the ground truth (a rank's arrival is its NCCL op's start): per
    rank, late arrivals inside the steps (the analyzer's rule: 100 us after
    the second-to-last rank) and the wait they caused, and the time it waited for the last rank
    inside its steps."""
    late, caused, waited = collections.Counter(), collections.Counter(), collections.Counter()
    for ops in by.values():
        if len(ops) < 2:
            continue
        starts = sorted((op["start_ns"], r) for r, op in ops.items())
        last, who = starts[-1]
        # As the analyzer, lateness counts inside every rank's steps only
        # (set-up collectives wait for ranks that are still starting).
        inside = all(ranks[r]["start_ns"] <= op["start_ns"] < ranks[r]["end_ns"] for r, op in ops.items())
        if inside and last - starts[-2][0] >= 100_000:
            late[who] += 1
            caused[who] += sum(last - a for a, _ in starts)
        for a, r in starts:
            lo, hi = ranks[r]["start_ns"], ranks[r]["end_ns"]
            waited[r] += max(0, min(last, hi) - max(a, lo))
    return late, caused, waited


STRAGGLER_MAX_P = 0.01      # analyzer/analyze/ranks.h kStragglerMaxP
STRAGGLER_MIN_SHARE = 0.05  # analyzer/analyze/ranks.h kStragglerMinShare


def binomial_tail(n, k, p):
    """P(X >= k) for X ~ Binomial(n, p)."""
    return sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k, n + 1))


def truth_stragglers(late, caused, ranks):
    """The analyzer's straggler rule (analyzer/analyze/ranks.h) applied to the ground
    truth's late arrivals and caused waits: (ranks that must be named, ranks
    that may be). A rank within a factor of the rule's thresholds (p within
    10x of 0.01, the caused share within 20% of 5%) may go either way: the
    analyzer's caused wait is the truth's within 5%, not to the nanosecond.
    On a loaded machine the rank the job slowed down may not be the truth's
    straggler, or not the only one: the oracle is what happened."""
    n = len(ranks)
    total = sum(late.values())
    mean_wall = sum(r["wall_ns"] for r in ranks.values()) / n
    must, may = set(), set()
    for r in ranks:
        if late[r] == 0:
            continue
        p = binomial_tail(total, late[r], 1.0 / n)
        share = caused[r] / mean_wall if mean_wall else 0
        if p < STRAGGLER_MAX_P / 10 and share >= STRAGGLER_MIN_SHARE * 1.2:
            must.add(r)
        if p < STRAGGLER_MAX_P * 10 and share >= STRAGGLER_MIN_SHARE * 0.8:
            may.add(r)
    return must, may


def check_stragglers(report, late, caused, ranks, slow):
    """The report's stragglers against the ground truth (`slow`: the rank
    the job slowed down, None for none): the ranks the
    analyzer's rule makes stragglers in the truth (truth_stragglers) named,
    no others; the first the one that caused the most wait; each one's
    caused wait within 5% of the truth's and its late arrivals exact; q5
    names the first. Returns the ranks named."""
    st = report["stragglers"]
    named = [s["rank"] for s in st]
    must, may = truth_stragglers(late, caused, ranks)
    check(must <= set(named) <= may,
          f"stragglers {named}; by the ground truth (late {dict(late)}, caused {dict(caused)}) "
          f"rank(s) {sorted(must)} must be named and only {sorted(may)} may be")
    if slow is not None and slow not in must:
        print(f"note: the ground truth does not make the slow rank {slow} a clear straggler "
              f"(late {dict(late)}, caused {dict(caused)}); the report agrees with the truth")
    if not named:
        return named
    check(st[0]["rank"] == max(named, key=lambda r: caused[r]),
          f"stragglers {named}: the first is not the one that caused the most wait in truth")
    for s_ in st:
        truth = caused[s_["rank"]]
        check(abs(s_["wait_caused_ns"] - truth) <= 0.05 * truth,
              f"rank {s_['rank']}: wait caused {s_['wait_caused_ns']} ns, ground truth {truth} ns (5%)")
        check(s_["times_last"] == late[s_["rank"]],
              f"rank {s_['rank']}: times last {s_['times_last']}, truth {late[s_['rank']]}")
    q5 = next(q for q in report["questions"] if q["id"] == "q5")
    check(q5["answer"] == "yes" and f"rank {st[0]['rank']} arrives last" in q5["evidence"], f"q5 {q5}")
    return named


def case_straggler(build, work):
    """One slow rank (a 3 ms input wait before every step): the analyzer names
    it the straggler, the wait it caused agrees with the ground truth within
    5%, and the other ranks' waiting is GPU idle charged to `comm` (within 5%
    of the time the ground truth has them wait for the last rank: a wait
    charged to `sync` or `host_wait` is missing there). Their other idle is
    whatever their host did, on a loaded machine preemption too: not
    bounded by a nominal share."""
    if not os.path.exists(os.path.join(build, "bin", "ddp_train")):
        return SKIP
    world, steps, slow = 4, 8, 2
    report, by = run_ddp(build, work, world, steps, ["--slow-rank", str(slow), "--slow-us", "3000"])
    ranks = {r["rank"]: r for r in report.get("ranks", [])}
    check(sorted(ranks) == list(range(world)), f"ranks[] {sorted(ranks)}")
    late, caused, waited = truth_waits(by, ranks)
    st = report["stragglers"]
    named = check_stragglers(report, late, caused, ranks, slow)
    if not named:
        return 0
    truth = caused[slow]
    for r, row in ranks.items():
        if r in named:
            continue
        c = row["idle_by_cause"]
        check(abs(c["comm"] - waited[r]) <= 0.05 * waited[r] + 100_000,
              f"rank {r}: comm idle {c['comm']} ns, waited for the last rank {waited[r]} ns in truth")
    first = st[0]["rank"]
    code, text = audit_stragglers(build, work)
    check(code == 3 and f"straggler rank {first}" in text, f"audit exited {code}: {text[-1500:]}")
    print(f"straggler: rank {slow}, wait caused {st[0]['wait_caused_ns']} ns (truth {truth}), "
          f"comm idle {[ranks[r]['idle_by_cause']['comm'] for r in sorted(ranks)]}")
    return 0


def ddp_pids(*env_entries):
    """The running ddp_train processes whose environment holds every one of
    `env_entries` (e.g. b"RANK=1", b"MASTER_PORT=29637")."""
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if os.path.basename(f.read().split(b"\0")[0]) != b"ddp_train":
                    continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if all(e in env for e in env_entries):
            pids.append(int(pid))
    return pids


def start_endless_ddp(build, work, launcher_args):
    """Starts `stallscope run --sim` over the launcher and ddp_train ranks
    that run until stopped; returns (process, trace folder)."""
    env = dict(os.environ)
    env["SIMGPU_KERNEL_US"] = "*gemm_fwd*=400,*gemm_bwd*=300,*=20"
    out = os.path.join(work, "trace")
    proc = subprocess.Popen([os.path.join(build, "bin", "stallscope"), "run", "--sim", "-q", "--out", out,
                             "--", LAUNCH] + launcher_args + ["--", os.path.join(build, "bin", "ddp_train"),
                                                               "--steps", "100000"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, out


def wait_for_drains(out, ranks, drains=3, timeout=60):
    """Until `ranks` trace files are in `out` and each has grown `drains`
    times since it appeared (the writer's periodic drains reached the disk),
    however slowly a loaded machine started the ranks."""
    grew = collections.Counter()
    size = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        files = glob.glob(os.path.join(out, "*.sstrace"))
        for f in files:
            try:
                n = os.path.getsize(f)
            except OSError:
                continue
            if f in size and n != size[f]:
                grew[f] += 1
            size[f] = n
        if len(files) >= ranks and all(grew[f] >= drains for f in files):
            return
        time.sleep(0.05)
    raise Failure(f"the ranks' traces did not grow {drains} times within {timeout} s: "
                  f"{ {os.path.basename(f): grew[f] for f in size} }")


def case_killed_rank(build, work):
    """Rank 1 of 3 is killed with SIGKILL mid-run; the launcher stops the
    others (SIGTERM). `stallscope run` exits with the launcher's code, every
    rank's trace reads up to its last write, and the report analyzes them
    all, naming each trace that ends before its process finished
    (incomplete_traces), rank 1's among them."""
    if not os.path.exists(os.path.join(build, "bin", "ddp_train")):
        return SKIP
    exe = os.path.join(build, "bin", "stallscope")
    proc, out = start_endless_ddp(build, work, ["-n", "3"])
    try:
        victim = None
        deadline = time.monotonic() + 60
        while victim is None and time.monotonic() < deadline:
            time.sleep(0.2)
            # Rank 1, once it has a trace written.
            for pid in ddp_pids(b"RANK=1"):
                if glob.glob(os.path.join(out, f"*-{pid}.sstrace")):
                    victim = pid
        check(victim is not None, "rank 1 never started writing its trace")
        wait_for_drains(out, 3)  # mid-run: several drains of every rank written
        os.kill(victim, signal.SIGKILL)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    check(proc.returncode == 137, f"stallscope run exited {proc.returncode}, expected the launcher's 137: "
          f"{err[-1500:]}")
    rep = subprocess.run([exe, "report", out, "--format", "json"], capture_output=True, text=True, timeout=300)
    check(rep.returncode == 0, f"report exited {rep.returncode}: {rep.stderr[-1500:]}")
    checks.check_folder_one_at_a_time(exe, out, rep.stdout)
    report = json.loads(rep.stdout)
    ranks = sorted(r["rank"] for r in report.get("ranks", []))
    check(ranks == [0, 1, 2], f"ranks[] {ranks}")
    d = next((x for x in report["diagnostics"] if x["name"] == "incomplete_traces"), None)
    check(d is not None and f"-{victim}.sstrace (rank 1)" in d["message"],
          f"the killed rank is not named: {report['diagnostics']}")
    check(not any(x["name"] == "missing_ranks" for x in report["diagnostics"]), "a rank reported missing")
    print(f"killed_rank: rank 1 (pid {victim}) killed; {d['message']}")
    return 0


def case_sigterm_launcher(build, work):
    """SIGTERM to `stallscope run` wrapping the launcher mid-run: run passes it
    on, the launcher passes it to every rank and waits for them, and no rank
    is left running; run exits 143 and every rank's trace reads up to its
    last write (incomplete_traces names them)."""
    if not os.path.exists(os.path.join(build, "bin", "ddp_train")):
        return SKIP
    port = "29637"
    exe = os.path.join(build, "bin", "stallscope")
    proc, out = start_endless_ddp(build, work, ["-n", "2", "--master-port", port])

    def ranks_alive():
        return ddp_pids(f"MASTER_PORT={port}".encode())

    try:
        wait_for_drains(out, 2)
        check(len(glob.glob(os.path.join(out, "*.sstrace"))) == 2, "the ranks wrote more than two traces")
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            left = ranks_alive()
            for pid in left:
                os.kill(pid, signal.SIGKILL)
            raise Failure(f"stallscope run did not end within 60 s of SIGTERM; ranks left running: {left}")
    finally:
        if proc.poll() is None:
            proc.kill()
    check(proc.returncode == 143, f"stallscope run exited {proc.returncode}, expected 143: {err[-1500:]}")
    deadline = time.monotonic() + 10
    while ranks_alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    left = ranks_alive()
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    check(not left, f"ranks still running after the launcher stopped: {left}")
    rep = subprocess.run([exe, "report", out, "--format", "json"], capture_output=True, text=True, timeout=300)
    check(rep.returncode == 0, f"report exited {rep.returncode}: {rep.stderr[-1500:]}")
    report = json.loads(rep.stdout)
    check(sorted(r["rank"] for r in report.get("ranks", [])) == [0, 1], f"ranks[] {report.get('ranks')}")
    print("sigterm_launcher: run exited 143, no rank left running, both traces analyzed")
    return 0


def case_clean_ranks(build, work):
    """No slow rank: no straggler, and communication's share of step time
    within 2% of the ground truth's."""
    if not os.path.exists(os.path.join(build, "bin", "ddp_train")):
        return SKIP
    world, steps = 4, 8
    report, by = run_ddp(build, work, world, steps, [])
    ranks = {r["rank"]: r for r in report["ranks"]}
    # No rank is slowed; a loaded machine may still make one late in the
    # ground truth, and then the analyzer must name it (check_stragglers).
    late, caused, _ = truth_waits(by, ranks)
    named = check_stragglers(report, late, caused, ranks, None)
    comm = sum(union_in([(op["start_ns"], op["end_ns"]) for ops in by.values()
                         for rr, op in ops.items() if rr == r], row["start_ns"], row["end_ns"])
               for r, row in ranks.items())
    step_time = sum(row["end_ns"] - row["start_ns"] for row in ranks.values())
    truth = comm / step_time
    got = report["collectives"]["comm_share"]
    check(abs(got - truth) <= 0.02 * truth, f"comm share {got:.4f}, ground truth {truth:.4f} (2%)")
    code, text = audit_stragglers(build, work)
    check(code == (3 if named else 0), f"audit of a run with stragglers {named} exited {code}: "
                                       f"{text[-1500:]}")
    print(f"clean: comm share {got:.4f} (truth {truth:.4f}), stragglers {named or 'none'}")
    return 0


def case_inside_launcher(build, work):
    """`stallscope run` inside the launcher's command line (one per rank, as
    with `torchrun ... stallscope run -- python train.py`): every rank's
    trace lands in one folder named after the job, only rank 0 speaks, and
    the folder's report finds the slow rank."""
    if not os.path.exists(os.path.join(build, "bin", "ddp_train")):
        return SKIP
    exe = os.path.join(build, "bin", "stallscope")
    env = dict(os.environ)
    env["SIMGPU_KERNEL_US"] = "*gemm_fwd*=400,*gemm_bwd*=300,*=20"
    env["SIMGPU_TRACE"] = os.path.join(work, "truth-%p.jsonl")
    p = subprocess.run([LAUNCH, "-n", "3", "--master-port", "29611", "--", exe, "run", "--sim", "--",
                        os.path.join(build, "bin", "ddp_train"), "--steps", "6", "--slow-rank", "1",
                        "--slow-us", "3000"], env=env, cwd=work, capture_output=True, text=True,
                       timeout=180)
    check(p.returncode == 0, f"launch exited {p.returncode}: {p.stderr[-3000:]}")
    folders = [d for d in os.listdir(work) if d.startswith("stallscope-")]
    check(folders == ["stallscope-127.0.0.1-29611"],
          f"expected one shared folder named after MASTER_ADDR/PORT, found {folders}")
    out = os.path.join(work, folders[0])
    traces = glob.glob(os.path.join(out, "rank*.sstrace"))
    check(len(traces) == 3, f"{len(traces)} rank traces in {out}")
    said = [l for l in p.stderr.splitlines() if l.startswith("stallscope:")]
    check(len(said) == 1 and "rank 0 done" in said[0], f"stallscope's lines: {said}")
    rep = run([exe, "report", out, "--format", "json"], env)
    report = json.loads(rep.stdout)
    st = report["stragglers"]
    # The stragglers the ground truth makes (the analyzer's rule on the
    # truth's late arrivals and waits): rank 1 on a quiet machine.
    ranks = {r["rank"]: r for r in report.get("ranks", [])}
    _, by = truth_ops(work)
    late, caused, _ = truth_waits(by, ranks)
    must, may = truth_stragglers(late, caused, ranks)
    named = {x["rank"] for x in st}
    check(must <= named <= may, f"stragglers {sorted(named)}; the ground truth (late {dict(late)}, "
          f"caused {dict(caused)}) requires {sorted(must)} and allows {sorted(may)}")
    print(f"inside the launcher: one folder {folders[0]}, stragglers {sorted(named)} "
          f"(ground truth requires {sorted(must)})")
    return 0


CASES = {"rendezvous": case_rendezvous, "interpose": case_interpose, "ddp": case_ddp,
         "killed_rank": case_killed_rank, "sigterm_launcher": case_sigterm_launcher,
         "straggler": case_straggler, "clean_ranks": case_clean_ranks,
         "inside_launcher": case_inside_launcher}


def test_case(case, build, work):
    checks.run(CASES[case], build, work)


if __name__ == "__main__":
    sys.exit(checks.main(CASES, __file__))
