"""Fine-tuning a Qwen3-MoE-shaped model whose MoE blocks run on moec,
next to the same model in plain torch: the loss falls, the two loss curves
track each other, and both print tokens/s.

    python3 examples/finetune_moe.py                   # a GPU if there is one
    python3 examples/finetune_moe.py --device cpu --steps 30 --small

The model is built from a config with random weights (nothing is
downloaded); the data are synthetic: sequences of a fixed random bigram
"language" with low entropy, so that there is something to learn. Both
models start from the same weights and see the same batches; the moec one
has its sparse MoE blocks swapped for moec.torch.MoE
(moec.torch.replace_moe_blocks), whose forward and backward are the
kernels moec derives (moe-autodiff). Full fine-tuning in bf16 with AdamW
(LoRA on the experts: examples/finetune_lora.py).

`--micro-batches N` accumulates the gradients of N micro-batches per
optimizer step. `--main-grad` then gives the moec model's experts f32 main
gradients (replace_moe_blocks(main_grad=True)): the weight-gradient
kernels add each micro-batch's gradient to `.main_grad` in f32, where the
torch model adds bf16 `.grad`s; the optimizer step takes the sum as the
experts' `.grad`.

`--fp8` trains a third model, a copy whose moec blocks run their expert
matmuls in FP8 (replace_moe_blocks(fp8="blockwise"): DeepSeek-V3's
blockwise recipe, forward and backward) from the same weights on the same
batches, and compares its loss with the bf16 moec run's: `--check` then
also asks the average loss of the last quarter of the steps to be within
2 % of bf16's. `--keep-fp8-weights` (with `--fp8`) lets its blocks keep their
weights' FP8 copies until the optimizer step changes them
(replace_moe_blocks(keep_fp8_weights=True)): with `--micro-batches N` the
later micro-batches of a step quantize no weight, for the same losses.

Needs torch, transformers and moec (`pip install .`, or
PYTHONPATH=build/python_packages after `make`); on the GPU machine without
the compiler, the moec side needs precompiled bundles (docs/python.md).
"""

import argparse
import copy
import time

import torch
import transformers

import moec.torch


def make_config(small: bool):
    if small:
        return transformers.Qwen3MoeConfig(
            vocab_size=128, hidden_size=64, intermediate_size=128,
            moe_intermediate_size=32, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            num_experts=8, num_experts_per_tok=2, norm_topk_prob=True,
            max_position_embeddings=256)
    # Qwen3-30B-A3B's expert shape (E 128, top-8, I 768, H 2048), 4 layers.
    return transformers.Qwen3MoeConfig(
        vocab_size=4096, hidden_size=2048, intermediate_size=6144,
        moe_intermediate_size=768, num_hidden_layers=4,
        num_attention_heads=16, num_key_value_heads=4, head_dim=128,
        num_experts=128, num_experts_per_tok=8, norm_topk_prob=True,
        max_position_embeddings=4096)


def bigram_batches(vocab, batch, seq, steps, device, seed=0):
    """`steps` batches [batch, seq] of a random bigram chain in which each
    token has 4 likely successors."""
    gen = torch.Generator().manual_seed(seed)
    successors = torch.randint(0, vocab, (vocab, 4), generator=gen)
    for _ in range(steps):
        tokens = torch.empty(batch, seq, dtype=torch.long)
        tokens[:, 0] = torch.randint(0, vocab, (batch,), generator=gen)
        for t in range(1, seq):
            pick = torch.randint(0, 4, (batch,), generator=gen)
            tokens[:, t] = successors[tokens[:, t - 1], pick]
        yield tokens.to(device)


def train(model, batches, lr, micro_batches=1):
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    losses, tokens_seen, elapsed = [], 0, 0.0
    for step, ids in enumerate(batches):
        if ids.is_cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        loss = 0.0
        for part in ids.tensor_split(micro_batches):
            part_loss = model(input_ids=part, labels=part).loss
            (part_loss / micro_batches).backward()
            loss += part_loss.detach() / micro_batches
        for p in model.parameters():
            # The experts' f32 main gradients (main_grad=True, made by the
            # first training forward): the sum, as the optimizer of these
            # bf16 weights takes it.
            if getattr(p, "main_grad", None) is not None:
                p.grad = p.main_grad.to(p.dtype)
                p.main_grad.zero_()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(loss))  # also waits for the step
        if step >= 2:  # the first steps compile kernels / warm up
            elapsed += time.perf_counter() - start
            tokens_seen += ids.numel()
    return losses, tokens_seen / max(elapsed, 1e-9)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device",
                        default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--micro-batches", type=int, default=1,
                        help="gradient accumulation: micro-batches per step")
    parser.add_argument("--main-grad", action="store_true",
                        help="the moec experts accumulate into f32 "
                             "main gradients")
    parser.add_argument("--fp8", action="store_true",
                        help="also train the moec model with FP8 expert "
                             "matmuls and compare it with bf16")
    parser.add_argument("--keep-fp8-weights", action="store_true",
                        help="with --fp8: keep the weights' FP8 copies "
                             "between the micro-batches of a step")
    parser.add_argument("--small", action="store_true",
                        help="a tiny model (the CPU test)")
    parser.add_argument("--check", action="store_true",
                        help="exit non-zero unless the loss fell and the "
                             "curves track")
    args = parser.parse_args()
    if args.keep_fp8_weights and not args.fp8:
        parser.error("--keep-fp8-weights: only with --fp8")

    config = make_config(args.small or args.device == "cpu")
    torch.manual_seed(0)
    dtype = torch.bfloat16
    # Initialized on the device: the GPU model's 2.4 B parameters take
    # about a minute to initialize on the CPU.
    with torch.device(args.device):
        torch_model = transformers.AutoModelForCausalLM.from_config(
            config, dtype=dtype)
    models = {"torch": torch_model}
    for name, fp8 in (("moec", None), ("moec fp8", "blockwise")):
        if fp8 and not args.fp8:
            continue
        models[name] = copy.deepcopy(torch_model)
        swapped = moec.torch.replace_moe_blocks(
            models[name], main_grad=args.main_grad, fp8=fp8,
            keep_fp8_weights=bool(fp8) and args.keep_fp8_weights)
    print(f"{len(swapped)} MoE blocks on moec; {config.num_experts} experts, "
          f"top-{config.num_experts_per_tok}, hidden {config.hidden_size}, "
          f"device {args.device}" + (" (and in FP8)" if args.fp8 else ""))

    results = {}
    for name, model in models.items():
        batches = bigram_batches(config.vocab_size, args.batch, args.seq,
                                 args.steps, args.device)
        results[name] = train(model, batches, args.lr, args.micro_batches)
    losses = {name: r[0] for name, r in results.items()}
    print(f"{'step':>5}" + "".join(f" {name + ' loss':>13}"
                                   for name in losses))
    for step in list(range(0, args.steps, max(1, args.steps // 10))) + [-1]:
        print(f"{step if step >= 0 else 'final':>5}" + "".join(
            f" {curve[step]:13.4f}" for curve in losses.values()))
    torch_tps, moec_tps = results["torch"][1], results["moec"][1]
    if torch_tps and moec_tps:
        print("tokens/s: " + ", ".join(
            f"{name} {r[1]:,.0f} ({r[1] / torch_tps:.2f}x)"
            for name, r in results.items()))
    torch_losses, moec_losses = losses["torch"], losses["moec"]
    # bf16 training of two implementations drifts apart slowly: compare the
    # averages of the last quarter of the curves.
    tail = max(1, args.steps // 4)
    torch_tail = sum(torch_losses[-tail:]) / tail
    moec_tail = sum(moec_losses[-tail:]) / tail
    fell = moec_tail < 0.9 * moec_losses[0]
    # Early on the two runs differ only by rounding: a wrong expert gradient
    # shows there first (later, attention alone could learn the bigrams).
    early = min(5, args.steps)
    tracks = abs(moec_tail - torch_tail) <= 0.05 * torch_tail and all(
        abs(m - t) <= 0.01 * t for m, t in zip(moec_losses[:early],
                                                 torch_losses[:early]))
    print(f"loss fell: {fell} ({moec_losses[0]:.3f} -> {moec_tail:.3f}); "
          f"tracks torch within 5 % (first steps 1 %): {tracks} "
          f"({torch_tail:.3f})")
    fp8_tracks = True
    if args.fp8:
        fp8_tail = sum(losses["moec fp8"][-tail:]) / tail
        fp8_tracks = abs(fp8_tail - moec_tail) <= 0.02 * moec_tail
        print(f"fp8 tracks bf16 within 2 %: {fp8_tracks} ({fp8_tail:.3f} "
              f"against {moec_tail:.3f}, "
              f"{100 * (fp8_tail / moec_tail - 1):+.2f} %)")
    if args.check and not (fell and tracks and fp8_tracks):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
