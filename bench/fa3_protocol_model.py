#!/usr/bin/env python3
"""fa3_protocol_model.py: a model of the fa3 forward kernel's synchronisation (two Q buffers with
OSTORE's store thread, the K/V ring, ping-pong turns on named barriers, LAG's turns without
work), run on random tile sequences (key tiles per tile, 0 = a tile whose rows see no key) with a
random interleaving of the roles (ping-pong turns, or STAGGER: no turns, consumer c starting
each tile after consumer c - 1's first softmax, on named barrier 5 + 2 (c - 1) + the Q buffer
use's parity), to find deadlocks, a named barrier arrived at twice before it was waited for,
and unbalanced barriers before a change to backends/cuda/fa3_sm90/fa3_fwd.cuh reaches the GPU.
It mirrors the kernel's waits and arrivals by hand: keep the two in step.
LAG > 0 is the kernel of branch next/lag (measured and rejected in session 17, bench/NOTES.md);
main's kernel is the LAG = 0 case (a consumer idle past seqlen_q waits and arrives as a working
one does, so the model covers it).

    python3 bench/fa3_protocol_model.py           # every (consumers, lag) pair, and STAGGER
    python3 bench/fa3_protocol_model.py --no-empty-turns   # session 17's first LAG: deadlocks

Mbarrier phases are counted (a wait for use u completes once u + 1 phases have), not tracked by
parity; the kernel's parity waits are equivalent while no waiter falls two phases behind.
"""
import random, sys

EMPTY_TURNS = "--no-empty-turns" not in sys.argv

def run(tiles, WGS, LAG, STAGES, QB=2, seed=0, STAGGER=False):
    PINGPONG = not STAGGER
    rnd = random.Random(seed)
    comp = {}   # mbarrier completions
    arr = {}    # pending arrivals in the current phase
    need = {}
    def init(name, n): comp[name] = 0; arr[name] = 0; need[name] = n
    for b in range(2):
        init(('q_full', b), 1); init(('q_empty', b), WGS); init(('o_free', b), 1)
    for s in range(STAGES):
        for k in ('k_full', 'v_full'): init((k, s), 1)
        for k in ('k_empty', 'v_empty'): init((k, s), WGS)
    def arrive(name):
        arr[name] += 1
        if arr[name] == need[name]:
            arr[name] = 0; comp[name] += 1
    def done(name, use):  # phase `use` completed
        return comp[name] >= use + 1
    bar_arr = [0] * 16                  # named barriers: arrivals, and syncs entered
    bar_sync_entered = [0] * 16
    q_tile = [None, None]
    total = len(tiles)
    errors = []
    def bar_arrive(b):
        bar_arr[b] += 1
        if bar_arr[b] > bar_sync_entered[b] + 1:
            errors.append(f"double arrive on bar {b}")
    def producer():
        kv = 0; qn = 0
        for k in list(range(total)) + [None]:
            qb = qn % QB; quse = qn // QB; slot = qn & 1
            if quse > 0:
                yield lambda: done(('o_free', qb), quse - 1)
            qn += 1
            q_tile[slot] = k
            arrive(('q_full', qb))
            if k is None: return
            for n in range(tiles[k]):
                st = kv % STAGES; use = kv // STAGES
                if use > 0: yield lambda: done(('k_empty', st), use - 1)
                arrive(('k_full', st))
                if use > 0: yield lambda: done(('v_empty', st), use - 1)
                arrive(('v_full', st))
                kv += 1
    def store():
        u = 0
        while True:
            b = u % QB
            yield lambda: done(('q_full', b), u // QB)
            if q_tile[u & 1] is None: return
            yield lambda: done(('q_empty', b), u // QB)
            arrive(('o_free', b)); u += 1
    def consumer(c):
        turned = False
        kv = 0; qn = 0
        def bar_sync(b):
            bar_sync_entered[b] += 1
            mine = bar_sync_entered[b]
            yield lambda: bar_arr[b] >= mine
        def turn_wait():
            if PINGPONG: yield from bar_sync(1 + c)
        def turn_pass():
            if PINGPONG: bar_arrive(1 + (c + 1) % WGS)
        def turns_begin():
            nonlocal turned
            if not turned:
                if c == WGS - 1 and PINGPONG: bar_arrive(1)
                for i in range(c * LAG):
                    yield from turn_wait(); turn_pass()
            turned = True
        while True:
            qb = qn % QB; slot = qn & 1
            yield lambda: done(('q_full', qb), qn // QB)
            k = q_tile[slot]
            if k is None: break
            n = tiles[k]
            if n == 0:  # (an idle consumer past seqlen_q waits and arrives as a working one)
                arrive(('q_empty', qb))
                if LAG and EMPTY_TURNS:
                    yield from turns_begin()
                    for i in range(2):
                        yield from turn_wait(); turn_pass()
                qn += 1; continue
            yield from turns_begin()
            # consumer c after consumer c - 1: barriers 5 + 2 (c - 1) + parity (three consumers:
            # a chain, not built in the kernel yet)
            if STAGGER and c > 0: yield from bar_sync(5 + 2 * (c - 1) + (qn & 1))
            st = kv % STAGES
            yield from turn_wait()
            yield lambda: done(('k_full', st), kv // STAGES)
            turn_pass()
            arrive(('k_empty', st))
            if STAGGER and c < WGS - 1: bar_arrive(5 + 2 * c + (qn & 1))  # after its 1st softmax
            kv += 1
            for j in range(1, n):
                ps = (kv - 1) % STAGES; st = kv % STAGES
                yield from turn_wait()
                yield lambda: done(('k_full', st), kv // STAGES)
                yield lambda: done(('v_full', ps), (kv - 1) // STAGES)
                turn_pass()
                arrive(('k_empty', st))
                arrive(('v_empty', ps))
                kv += 1
            ls = (kv - 1) % STAGES
            yield from turn_wait()
            yield lambda: done(('v_full', ls), (kv - 1) // STAGES)
            turn_pass()
            arrive(('v_empty', ls))
            arrive(('q_empty', qb))
            qn += 1
        if turned:
            for i in range((WGS - 1 - c) * LAG):
                yield from turn_wait(); turn_pass()
            if c == 0 and PINGPONG: yield from turn_wait()
    procs = [producer(), store()] + [consumer(c) for c in range(WGS)]
    waits = [None] * len(procs)
    alive = list(range(len(procs)))
    while alive:
        runnable = [i for i in alive if waits[i] is None or waits[i]()]
        if not runnable:
            return "DEADLOCK"
        i = rnd.choice(runnable)
        try:
            waits[i] = next(procs[i])
        except StopIteration:
            alive.remove(i)
        if errors: return errors[0]
    # every barrier balanced
    for b in range(1, 16):
        if bar_arr[b] != bar_sync_entered[b]: return f"bar {b} unbalanced {bar_arr[b]} vs {bar_sync_entered[b]}"
    return "ok"

bad = 0
for WGS, LAG, STAGGER in ((2, 0, False), (2, 1, False), (2, 2, False), (3, 1, False),
                          (3, 0, False), (2, 0, True), (3, 0, True)):
    STAGES = 3 + (WGS - 1) * LAG
    for trial in range(3000):
        r = random.Random(trial)
        ntiles = r.randint(0, 12)
        tiles = [r.choice([0, 0, 1, 1, 2, 3, 5, 8]) for _ in range(ntiles)]
        res = run(tiles, WGS, LAG, STAGES, seed=trial, STAGGER=STAGGER)
        if res != "ok":
            bad += 1
            if bad < 10: print(WGS, LAG, tiles, res)
    print("WGS", WGS, "LAG", LAG, "STAGGER" if STAGGER else "", "done")
print("failures", bad)
sys.exit(1 if bad else 0)
