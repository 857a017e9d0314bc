# Measures how far transformers itself lands from its float32 prompt log-probabilities
# when the reference-tiny models run in bfloat16 and in float16 (run on the GPU machine
# from the repo root with out/shared holding ../shared/models, as scripts/gpu-e2e.sh
# unpack arranges; `scripts/gpu-e2e.sh bf16ref` runs it). Its figures are
# engine/testdata/transformers_bf16.json, the bounds TestGPUReferenceModels holds
# gosling's bf16 (and, where the fixed 3e-2 does not hold, float16) GPU path to.
#
#   python3 scripts/bf16-reference.py [--update FILE] [MODEL ...]
#
# With no MODEL every reference model is measured; --update merges the measured models
# into FILE (the others keep their figures) and records the card and versions.
#
# The row "bf16 weights, float32 compute" runs the float32 model with only its weights
# rounded to bfloat16 (every activation, accumulation and the KV cache stay float32):
# the least any implementation with bf16 weights can differ from the float32 reference
# on these models, since it has exactly those weights. It is printed, not stored.
import argparse, json, sys
import torch
import transformers
from transformers import AutoModelForCausalLM

torch.backends.cuda.matmul.allow_tf32 = False  # float32 means float32
torch.backends.cudnn.allow_tf32 = False

ALL = ["llama_gqa", "llama_mha_tied", "qwen2_bias", "qwen3_qknorm", "mistral_swa", "gemma2_softcap_swa",
       "deepseek_v3_mla_moe", "qwen3_moe", "qwen2_moe", "mixtral", "gemma3_text", "phi3", "gpt_oss", "qwen3_yarn"]

ap = argparse.ArgumentParser()
ap.add_argument("models", nargs="*", default=ALL)
ap.add_argument("--update", help="JSON file to merge the measured bounds into")
args = ap.parse_args()
for m in args.models:
    if m not in ALL:
        sys.exit(f"unknown reference model {m!r}; known: {', '.join(ALL)}")

measured = {}
for name in args.models:
    d = f"out/shared/models/reference-tiny/{name}"
    ref = json.load(open(f"{d}/reference.json"))
    ids = torch.tensor([ref["input_ids"]], device="cuda")
    want = torch.tensor(ref["prompt_logprobs"], dtype=torch.float64)
    for dt in [torch.float32, torch.bfloat16, torch.float16, "bf16 weights, float32 compute"]:
        if isinstance(dt, str):
            m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).cuda().eval()
            with torch.no_grad():
                for p in m.parameters():
                    p.copy_(p.to(torch.bfloat16).float())
        else:
            m = AutoModelForCausalLM.from_pretrained(d, dtype=dt).cuda().eval()
        with torch.no_grad():
            logits = m(ids).logits.float()
        lp = torch.log_softmax(logits[0, :-1], -1).gather(-1, ids[0, 1:, None])[:, 0].cpu().double()
        diff = (lp - want).abs()
        print(name, dt, "max", f"{diff.max().item():.4g}", "mean", f"{diff.mean().item():.4g}", flush=True)
        if dt in (torch.bfloat16, torch.float16):
            measured[(name, dt)] = (round(diff.max().item(), 4), round(diff.mean().item(), 5))
        del m
        torch.cuda.empty_cache()

if args.update:
    try:
        out = json.load(open(args.update))
    except FileNotFoundError:
        out = {}
    keys = {torch.bfloat16: ("max_abs_logprob_error", "mean_abs_logprob_error"),
            torch.float16: ("f16_max_abs_logprob_error", "f16_mean_abs_logprob_error")}
    for (name, dt), (mx, mean) in measured.items():
        kmax, kmean = keys[dt]
        out.setdefault(kmax, {})[name] = mx
        out.setdefault(kmean, {})[name] = mean
    runs = out.get("produced_by", [])
    if isinstance(runs, str):
        runs = [runs]
    runs.append(f"scripts/bf16-reference.py on an {torch.cuda.get_device_name()}, transformers {transformers.__version__}, "
                f"torch {torch.__version__}: {', '.join(args.models)}: |log p(16-bit model) - log p(float32 reference.json)| "
                f"over the prompt positions")
    out["produced_by"] = runs
    with open(args.update, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    print("updated", args.update)
