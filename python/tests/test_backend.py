"""The "phalanx" torch.distributed backend against references, every rank checking every element.

Run under a launcher, e.g. `phalanx launch --standalone --nproc-per-node 3 python/tests/test_backend.py`
(crates/cli/tests/torch_backend.rs does, on 1, 2 and 3 ranks). Each rank's input is a function of
its rank, so every rank computes the expected result itself. Prints one "ok" line per rank.
"""


import torch
import torch.distributed as dist

import phalanx_torch  # noqa: F401  registers "phalanx"

dist.init_process_group("phalanx")
rank, world = dist.get_rank(), dist.get_world_size()
assert dist.get_backend() == "phalanx", dist.get_backend()

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
INTS = [torch.int32, torch.int64, torch.uint8]
COUNTS = [0, 1, 7, 1000, 65537]


def data(r, n, dtype):
    """Rank r's input: small integers, exact in every dtype and under every op."""
    v = (torch.arange(n, dtype=torch.int64) * 7 + r * 3 + 1) % 5 + 1
    return v.to(dtype)


def reduce_ref(op, n, dtype):
    xs = [data(r, n, dtype).to(torch.float64) for r in range(world)]
    acc = xs[0].clone()
    for x in xs[1:]:
        if op == dist.ReduceOp.SUM or op == dist.ReduceOp.AVG:
            acc += x
        elif op == dist.ReduceOp.PRODUCT:
            acc *= x
        elif op == dist.ReduceOp.MIN:
            acc = torch.minimum(acc, x)
        elif op == dist.ReduceOp.MAX:
            acc = torch.maximum(acc, x)
    if op == dist.ReduceOp.AVG:
        acc /= world
    return acc


def bit_ref(op, n, dtype):
    xs = [data(r, n, dtype) for r in range(world)]
    acc = xs[0].clone()
    for x in xs[1:]:
        acc = {dist.ReduceOp.BAND: torch.bitwise_and, dist.ReduceOp.BOR: torch.bitwise_or,
               dist.ReduceOp.BXOR: torch.bitwise_xor}[op](acc, x)
    return acc


def close(got, want, dtype, what):
    tol = {torch.bfloat16: 1e-2, torch.float16: 1e-3, torch.float32: 1e-6}.get(dtype, 1e-12)
    got = got.to(torch.float64)
    want = want.to(torch.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    if got.numel():
        err = ((got - want).abs() / want.abs().clamp(min=1)).max().item()
        assert err <= tol, f"{what}: max relative error {err} (got {got[:8]}, want {want[:8]})"


checked = 0
for dtype in FLOATS + INTS:
    ops = [dist.ReduceOp.SUM, dist.ReduceOp.MIN, dist.ReduceOp.MAX]
    if dtype in FLOATS:
        ops += [dist.ReduceOp.AVG, dist.ReduceOp.PRODUCT]
    for n in COUNTS:
        for op in ops:
            t = data(rank, n, dtype)
            dist.all_reduce(t, op=op)
            close(t, reduce_ref(op, n, dtype), dtype, f"all_reduce {op} {dtype} n={n}")
            t = data(rank, n, dtype)
            dist.reduce(t, dst=world - 1, op=op)
            if rank == world - 1:
                close(t, reduce_ref(op, n, dtype), dtype, f"reduce {op} {dtype} n={n}")
            checked += 2
        if dtype in INTS:
            for op in [dist.ReduceOp.BAND, dist.ReduceOp.BOR, dist.ReduceOp.BXOR]:
                t = data(rank, n, dtype)
                dist.all_reduce(t, op=op)
                assert torch.equal(t, bit_ref(op, n, dtype)), f"all_reduce {op} {dtype} n={n}"
                checked += 1
        # Data movement: every dtype, bool and int8 too (moved as bytes).
        # broadcast from every root
        for root in range(world):
            t = data(rank, n, dtype)
            dist.broadcast(t, src=root)
            assert torch.equal(t, data(root, n, dtype)), f"broadcast {dtype} n={n} root={root}"
        outs = [torch.empty(n, dtype=dtype) for _ in range(world)]
        dist.all_gather(outs, data(rank, n, dtype))
        for r in range(world):
            assert torch.equal(outs[r], data(r, n, dtype)), f"all_gather {dtype} n={n} from {r}"
        flat = torch.empty(world * n, dtype=dtype)
        dist.all_gather_into_tensor(flat, data(rank, n, dtype))
        assert torch.equal(flat, torch.cat([data(r, n, dtype) for r in range(world)]))
        # reduce_scatter: block r of the sum of everyone's world*n input
        inp = torch.cat([data(rank + 10 * b, n, dtype) for b in range(world)])
        before = inp.clone()
        out = torch.empty(n, dtype=dtype)
        dist.reduce_scatter_tensor(out, inp)
        want = sum(data(r + 10 * rank, n, dtype).to(torch.float64) for r in range(world))
        close(out, want, dtype, f"reduce_scatter_tensor {dtype} n={n}")
        assert torch.equal(inp, before), "reduce_scatter_tensor changed its input"
        # gather / scatter to and from the last rank
        root = world - 1
        g = [torch.empty(n, dtype=dtype) for _ in range(world)] if rank == root else None
        dist.gather(data(rank, n, dtype), g, dst=root)
        if rank == root:
            for r in range(world):
                assert torch.equal(g[r], data(r, n, dtype)), f"gather {dtype} n={n}"
        s = torch.empty(n, dtype=dtype)
        dist.scatter(s, [data(100 + r, n, dtype) for r in range(world)] if rank == root else None, src=root)
        assert torch.equal(s, data(100 + rank, n, dtype)), f"scatter {dtype} n={n}"
        # all_to_all, equal splits
        send = torch.cat([data(rank * world + p, n, dtype) for p in range(world)])
        recv = torch.empty(world * n, dtype=dtype)
        dist.all_to_all_single(recv, send)
        assert torch.equal(recv, torch.cat([data(p * world + rank, n, dtype) for p in range(world)]))
        checked += 6 + world

# PREMUL_SUM (`_make_nccl_premul_sum`): every rank's values scaled by the factor, then summed.
for dtype in FLOATS:
    for factor in [0.5, torch.tensor([0.25], dtype=torch.float64)]:
        f = float(factor)
        t = data(rank, 1000, dtype)
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(factor))
        want = sum(data(r, 1000, dtype).to(torch.float64) * f for r in range(world))
        close(t, want, dtype, f"all_reduce PREMUL_SUM {f} {dtype}")
        inp = torch.cat([data(rank + 10 * b, 7, dtype) for b in range(world)])
        before = inp.clone()
        out = torch.empty(7, dtype=dtype)
        dist.reduce_scatter_tensor(out, inp, op=dist._make_nccl_premul_sum(factor))
        want = sum(data(r + 10 * rank, 7, dtype).to(torch.float64) * f for r in range(world))
        close(out, want, dtype, f"reduce_scatter_tensor PREMUL_SUM {f} {dtype}")
        assert torch.equal(inp, before), "reduce_scatter_tensor PREMUL_SUM changed its input"
        checked += 2
try:
    dist.all_reduce(torch.ones(3, dtype=torch.int32), op=dist._make_nccl_premul_sum(2.0))
    raise AssertionError("PREMUL_SUM on int32 was not refused")
except Exception as e:  # noqa: BLE001 - PyTorch may wrap the backend's error
    assert "PREMUL_SUM scales floating-point tensors, not torch.int32" in str(e), e

# bool and int8, moved as bytes
for dtype in [torch.bool, torch.int8, torch.complex64]:
    t = (torch.arange(9) % 2 == rank % 2).to(dtype) if dtype == torch.bool else torch.arange(9).to(dtype) + rank
    want = (torch.arange(9) % 2 == 0).to(dtype) if dtype == torch.bool else torch.arange(9).to(dtype)
    dist.broadcast(t, src=0)
    assert torch.equal(t, want), f"broadcast {dtype}"
    checked += 1

# unequal splits: rank r sends p + 1 rows to rank p
rows_to = [p + 1 for p in range(world)]
send = torch.cat([torch.full((p + 1, 2), float(rank * 10 + p)) for p in range(world)])
recv = torch.empty((rank + 1) * world, 2)
dist.all_to_all_single(recv, send, output_split_sizes=[rank + 1] * world, input_split_sizes=rows_to)
want = torch.cat([torch.full((rank + 1, 2), float(q * 10 + rank)) for q in range(world)])
assert torch.equal(recv, want), (recv, want)
# alltoall with a list of tensors of different sizes
outs = [torch.empty(rank + 1) for _ in range(world)]
dist.all_to_all(outs, [torch.full((p + 1,), float(rank)) for p in range(world)])
for q in range(world):
    assert torch.equal(outs[q], torch.full((rank + 1,), float(q)))

# point to point: a ring, many rounds, interleaved with collectives of all
if world > 1:
    for i in range(200):
        x = torch.full((5,), float(rank * 1000 + i))
        y = torch.empty(5)
        nxt, prv = (rank + 1) % world, (rank - 1) % world
        reqs = [dist.isend(x, nxt), dist.irecv(y, prv)]
        for q in reqs:
            q.wait()
        assert torch.equal(y, torch.full((5,), float(prv * 1000 + i))), (i, y)
        if i % 20 == 0:
            z = torch.ones(3)
            dist.all_reduce(z)
            assert z.eq(world).all()
    checked += 200

# receives posted before sends (a ring of irecv; isend; wait), and large messages crossing
if world > 1:
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    for n in [3, 1 << 22]:
        y = torch.empty(n)
        r_ = dist.irecv(y, prv)
        s_ = dist.isend(torch.full((n,), float(rank)), nxt)
        r_.wait()
        s_.wait()
        assert y.eq(float(prv)).all(), (n, y[:4])
    # batch_isend_irecv, PyTorch's pipeline building block
    y = torch.empty(4)
    ops = [dist.P2POp(dist.isend, torch.full((4,), float(rank)), nxt),
           dist.P2POp(dist.irecv, y, prv)]
    for q in dist.batch_isend_irecv(ops):
        q.wait()
    assert y.eq(float(prv)).all(), y
    checked += 3
    # Sends go at once and complete whatever the peer does (Note [Deferred point-to-point]):
    # a receive posted before a collective whose peer sends only after it, and a send larger
    # than the socket buffers issued before a collective that its peer enters first. Both hung
    # until the timeout when sends and receives were held until the next collective.
    n = 1 << 23
    y = torch.empty(n)
    r_ = dist.irecv(y, prv)
    z = torch.ones(3)
    dist.all_reduce(z)
    s_ = dist.isend(torch.full((n,), float(rank)), nxt)
    r_.wait()
    s_.wait()
    assert y.eq(float(prv)).all() and z.eq(world).all(), (y[:4], z)
    if rank == 0:
        s_ = dist.isend(torch.full((n,), 7.0), 1)
        dist.all_reduce(z)
        s_.wait()
    else:
        dist.all_reduce(z)
        if rank == 1:
            dist.recv(y, 0)
            assert y.eq(7.0).all(), y[:4]
    assert z.eq(world * world).all(), z
    checked += 2

# large operations go to the group's thread: queued in order, every temporary kept alive
big = 1 << 19  # 2 MiB of float32
works = [dist.all_reduce(torch.full((big,), float(i)), async_op=True) for i in range(6)]
root = world - 1
sc_out = torch.empty(big)
sc = dist.scatter(sc_out, [torch.full((big,), float(r)) for r in range(world)] if rank == root else None,
                  src=root, async_op=True)
a2a_out = [torch.empty(big // world) for _ in range(world)]
a2a = dist.all_to_all(a2a_out, [torch.full((big // world,), float(rank * 10 + p)) for p in range(world)],
                      async_op=True)
rs_out = torch.empty(big)
rs = dist.reduce_scatter(rs_out, [torch.full((big,), float(p)) for p in range(world)], async_op=True)
import gc
gc.collect()  # the temporaries above are unreachable from here: the works must hold them
for i, w in enumerate(works):
    w.wait()
    assert w.get_future().wait()[0].eq(i * world).all(), i
sc.wait()
assert sc_out.eq(float(rank)).all()
a2a.wait()
for q in range(world):
    assert a2a_out[q].eq(float(q * 10 + rank)).all(), q
rs.wait()
assert rs_out.eq(float(rank * world)).all(), rs_out[:4]
checked += 9

# all_gather_into_tensor in place (FSDP's pattern: the input is this rank's chunk of the output)
out = torch.zeros(world * 5)
out.chunk(world)[rank].fill_(float(rank + 1))
dist.all_gather_into_tensor(out, out.chunk(world)[rank])
assert out.tolist() == sum([[float(r + 1)] * 5 for r in range(world)], []), out

# async ops complete in order, futures carry the output
works = [dist.all_reduce(torch.full((100,), float(i)), async_op=True) for i in range(20)]
for i, w in enumerate(works):
    w.wait()
    assert w.get_future().wait()[0].eq(i * world).all()
dist.barrier()

# object collectives ride on the tensor ones
objs = [None] * world
dist.all_gather_object(objs, {"rank": rank, "name": f"r{rank}"})
assert objs == [{"rank": r, "name": f"r{r}"} for r in range(world)]

# a subgroup of the even ranks runs its own collectives beside the world's
evens = dist.new_group([r for r in range(world) if r % 2 == 0])
if rank % 2 == 0:
    e = torch.ones(4)
    dist.all_reduce(e, group=evens)
    assert e.eq((world + 1) // 2).all(), e
dist.barrier()

# all_gather and reduce_scatter of unequal sizes (phalanx's allgather_v / reduce_scatter_v):
# rank p's piece has p + 1 rows of 3
for dtype in [torch.float32, torch.int64, torch.bfloat16]:
    outs = [torch.empty(p + 1, 3, dtype=dtype) for p in range(world)]
    dist.all_gather(outs, torch.full((rank + 1, 3), rank + 1, dtype=dtype))
    for p in range(world):
        assert outs[p].eq(p + 1).all(), (dtype, p, outs[p])
    mine = torch.empty(rank + 1, 3, dtype=dtype)
    dist.reduce_scatter(mine, [torch.full((p + 1, 3), rank + p, dtype=dtype) for p in range(world)])
    assert mine.eq(sum(r + rank for r in range(world))).all(), (dtype, mine)
    checked += 2

# all_gather_coalesced: tensors of several shapes in one call (torch wants one dtype)
ins = [torch.full((2, 2), float(rank)), torch.full((3,), float(rank)), torch.ones(0)]
outs = [[torch.empty_like(t) for t in ins] for _ in range(world)]
dist.all_gather_coalesced(outs, ins)
for p in range(world):
    assert outs[p][0].eq(p).all() and outs[p][1].eq(p).all() and outs[p][2].numel() == 0
checked += 1

# a sparse tensor's sum (c10d hands it to allreduce)
sp = torch.sparse_coo_tensor([[rank, world]], [1.0, float(rank)], (world + 1,))
dist.all_reduce(sp)
expect = torch.ones(world + 1)
expect[world] = sum(range(world))
assert torch.equal(sp.to_dense(), expect), sp
checked += 1

# receives from any source: every other rank sends twice, the source comes back
if world > 1:
    dist.barrier()
    for dst in range(world):
        if dst == rank:
            got = []
            for _ in range(2 * (world - 1)):
                y = torch.empty(5)
                got.append(dist.recv(y, tag=7))
                assert y.eq(got[-1]).all(), (got, y)
            assert sorted(got) == sorted([r for r in range(world) if r != rank] * 2), got
        else:
            dist.send(torch.full((5,), float(rank)), dst, tag=7)
            dist.send(torch.full((5,), float(rank)), dst, tag=7)
    checked += 1
dist.barrier()

# an async collective's Work answers is_completed() once done (behind c10d's C++ holder)
w = dist.all_reduce(torch.ones(1 << 19), async_op=True)
w.wait()
assert w.is_completed() and w.exception() is None
checked += 1

# refusals name what is wrong
try:
    dist.all_reduce(torch.ones(4, 4).t())
    raise SystemExit("a non-contiguous tensor was accepted")
except (RuntimeError, ValueError) as e:
    assert "contiguous" in str(e), e
try:
    dist.all_reduce(torch.ones(3, dtype=torch.int8))
    raise SystemExit("an int8 reduction was accepted")
except (RuntimeError, ValueError) as e:
    assert "int8" in str(e), e

print(f"rank {rank} of {world}: phalanx backend ok ({checked} checks)", flush=True)
dist.destroy_process_group()
