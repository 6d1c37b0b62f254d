"""GPU checks of moec.ep's copy-engine transport (two or more GPUs of one
host, one process each): the layer over the copy engines, pipelined by
tokens (`chunks`) and by experts (`expert_chunks`, equal and uneven
groups), against the same layer over NCCL, bitwise, forward and training
gradients, for token counts that leave every rank (as the first call) or
one rank with no tokens, T = 1, and all tokens routed to rank 0's experts
(the other ranks receive nothing); a `main_grad=True` layer over NCCL,
whose experts' f32 main gradients must match the plain layer's bf16
gradients within their rounding; and the `dedup=True` layer over both
transports, forward and gradients: bitwise the same on both, the plain
layer's within bf16 rounding.

Where the compiler is, write the bundles (world size W):

    python3 python/tests/gpu_ep_checks.py --prepare DIR --world 2

then on the GPUs (runtime-only moec package, torch):

    NCCL_NVLS_ENABLE=0 torchrun --nproc_per_node 2 \\
        python/tests/gpu_ep_checks.py DIR

Prints one line per check and raises AssertionError on a mismatch.
"""

import argparse
import os

H, I, E, K = 256, 128, 16, 2
#: expert_chunks variants checked (local experts E / W: 8 at W = 2).
GROUPS = {2: (2, (1, 5, 2)), 4: (2, (1, 3))}


def bundle_name(folder, world, expert_chunks):
    tag = ("-".join(map(str, expert_chunks))
           if isinstance(expert_chunks, tuple) else str(expert_chunks))
    return os.path.join(folder, f"ep_check_w{world}_x{tag}.moecb")


def main_grad_bundle(folder, world):
    return os.path.join(folder, f"ep_check_w{world}_main_grad.moecb")


def dedup_bundle(folder, world):
    return os.path.join(folder, f"ep_check_w{world}_dedup.moecb")


def prepare(folder, world):
    import moec
    from moec.ep import ep_module
    os.makedirs(folder, exist_ok=True)
    for chunks in (1,) + GROUPS[world]:
        path = bundle_name(folder, world, chunks)
        moec.compile(ep_module(H, I, E, K, world, expert_chunks=chunks),
                     "sm_90a").save(path)
        print(path)
    path = main_grad_bundle(folder, world)
    moec.compile(ep_module(H, I, E, K, world, main_grad=True),
                 "sm_90a").save(path)
    print(path)
    path = dedup_bundle(folder, world)
    moec.compile(ep_module(H, I, E, K, world, dedup=True),
                 "sm_90a").save(path)
    print(path)


def run(folder):
    import torch
    import torch.distributed as dist
    import moec
    from moec.ep import ExpertParallelMoE

    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda",
                                                           local_rank))
    rank, world = dist.get_rank(), dist.get_world_size()
    plain = moec.load(bundle_name(folder, world, 1))

    def block(transport, bundle=plain, **kwargs):
        b = ExpertParallelMoE(H, I, E, K, transport=transport, bundle=bundle,
                              device="cuda", **kwargs)
        b.load_state_dict(reference.state_dict())
        return b

    gen = torch.Generator(device="cuda").manual_seed(7)
    reference = ExpertParallelMoE(H, I, E, K, bundle=plain, device="cuda")
    with torch.no_grad():
        for p in reference.parameters():  # the same weights on every rank
            p.copy_(torch.randn(p.shape, device="cuda", generator=gen,
                                dtype=p.dtype) * 0.05)
    nccl = reference
    engines = block("copy_engine")
    pieces = block("copy_engine", chunks=3)
    grouped = [block("copy_engine", expert_chunks=groups,
                     bundle=moec.load(bundle_name(folder, world, groups)))
               for groups in GROUPS[world]]
    mains = block("nccl", bundle=moec.load(main_grad_bundle(folder, world)),
                  main_grad=True)
    dedups = [block(transport, bundle=moec.load(dedup_bundle(folder, world)),
                    dedup=True) for transport in ("nccl", "copy_engine")]
    # First, no tokens anywhere: the copy engines' shared buffer is made
    # by a forward that moves no rows.
    cases = {"no tokens at all": 0, "T=37": 37,
             "rank 1 has none": 0 if rank == 1 else 29, "T=1": 1,
             "all to rank 0": 23}
    failed = []
    for name, tokens in cases.items():
        gen.manual_seed(100 + rank)
        x = torch.randn(tokens, H, device="cuda", generator=gen,
                        dtype=torch.bfloat16)
        if name == "all to rank 0":  # only rank 0's experts score
            x = x.abs() + 0.1
            saved = nccl.gate.weight.detach().clone()
            for b in [nccl, engines, pieces, mains] + grouped + dedups:
                with torch.no_grad():
                    b.gate.weight.copy_(saved.abs())
                    b.gate.weight[E // world:].neg_()
        with torch.no_grad():
            want = nccl(x)
            got = {"copy_engine": engines(x), "copy_engine chunks=3":
                   pieces(x)}
            for groups, b in zip(GROUPS[world], grouped):
                got[f"copy_engine expert_chunks={groups}"] = b(x)
            once = [b(x) for b in dedups]
        dy = torch.randn_like(want)
        grads = {}
        for label, b in (("nccl", nccl), ("copy_engine", engines),
                         ("copy_engine chunks=3", pieces),
                         ("dedup nccl", dedups[0]),
                         ("dedup copy_engine", dedups[1])):
            xg = x.detach().requires_grad_()
            for p in b.parameters():
                p.grad = None
            b(xg).backward(dy)
            grads[label] = [xg.grad] + [p.grad for p in b.parameters()]
        xg = x.detach().requires_grad_()
        mains.zero_main_grad()
        mains(xg).backward(dy)
        grads["main_grad"] = [xg.grad, *mains.main_grads()]
        checks = [(f"forward {label}", torch.equal(out, want))
                  for label, out in got.items()]
        # Each rank's partial sum is rounded to bf16 before it travels.
        near = (not want.numel() or (once[0] - want).float().norm() <=
                1e-2 * want.float().norm())
        checks.append(("forward dedup nccl (within 1e-2), copy_engine",
                       near and torch.equal(once[1], once[0])))

        def near_grads(got, want):
            return all(
                (a is None and b is None) or not b.numel() or
                (a - b).float().norm() <= 1e-2 * b.float().norm()
                for a, b in zip(got, want))

        checks.append(("gradients dedup nccl (within 1e-2), copy_engine",
                       near_grads(grads["dedup nccl"], grads["nccl"]) and
                       all((a is None and b is None) or torch.equal(a, b)
                           for a, b in zip(grads["dedup copy_engine"],
                                           grads["dedup nccl"]))))
        checks.append(("gradients copy_engine", all(
            (a is None and b is None) or torch.equal(a, b)
            for a, b in zip(grads["copy_engine"], grads["nccl"]))))
        # Pieces sum the experts' gradients piece by piece: x's gradient
        # is bitwise, the weights' within bf16 rounding.
        checks.append(("gradients copy_engine chunks=3 (x)", torch.equal(
            grads["copy_engine chunks=3"][0], grads["nccl"][0])))

        def close(main, want):  # f32 against the plain bf16 gradient
            if not want.abs().max() > 0:
                return not main.abs().max() > 0
            err = (main - want.float()).norm() / want.float().norm()
            return err.item() <= 1e-2

        checks.append(("main_grad: x bitwise, experts' main gradients",
                       torch.equal(grads["main_grad"][0], grads["nccl"][0])
                       and close(grads["main_grad"][1], nccl.w_gate_up.grad)
                       and close(grads["main_grad"][2], nccl.w_down.grad)
                       and mains.w_gate_up.grad is None))
        flags = torch.tensor([float(ok) for _, ok in checks], device="cuda")
        dist.all_reduce(flags, op=dist.ReduceOp.MIN)
        for (label, _), ok in zip(checks, flags.tolist()):
            if rank == 0:
                print(f"{name:<16} {label:<44} "
                      f"{'PASS' if ok else 'FAIL'}", flush=True)
            if not ok:
                failed.append((name, label))
        if name == "all to rank 0":
            for b in [nccl, engines, pieces, mains] + grouped + dedups:
                with torch.no_grad():
                    b.gate.weight.copy_(saved)
    dist.destroy_process_group()
    assert not failed, failed


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("bundles")
    parser.add_argument("--prepare", action="store_true",
                        help="write the bundles (needs the compiler)")
    parser.add_argument("--world", type=int, default=2, choices=(2, 4))
    args = parser.parse_args()
    if args.prepare:
        prepare(args.bundles, args.world)
    else:
        run(args.bundles)


if __name__ == "__main__":
    main()
