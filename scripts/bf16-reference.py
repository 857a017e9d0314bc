# Measures how far transformers itself lands from its float32 prompt log-probabilities
# when the reference-tiny models run in bfloat16 (run on the GPU machine from the repo
# root with out/shared holding ../shared/models, as scripts/gpu-e2e.sh build arranges).
# Its output is engine/testdata/transformers_bf16.json, the bound TestGPUReferenceModels
# holds gosling's bf16 GPU path to.
#
# The third row, "bf16 weights, float32 compute", runs the float32 model with only its
# weights rounded to bfloat16 (every activation, accumulation and the KV cache stay
# float32): the least any implementation with bf16 weights can differ from the float32
# reference on these models, since it has exactly those weights.
import json, torch, sys
torch.backends.cuda.matmul.allow_tf32 = False  # float32 means float32
torch.backends.cudnn.allow_tf32 = False
from transformers import AutoModelForCausalLM
for name in ["llama_gqa", "llama_mha_tied", "qwen2_bias", "qwen3_qknorm", "mistral_swa", "gemma2_softcap_swa", "deepseek_v3_mla_moe"]:
    d = f"out/shared/models/reference-tiny/{name}"
    ref = json.load(open(f"{d}/reference.json"))
    ids = torch.tensor([ref["input_ids"]], device="cuda")
    for dt in [torch.float32, torch.bfloat16, "bf16 weights, float32 compute"]:
        if isinstance(dt, str):
            m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).cuda().eval()
            with torch.no_grad():
                for p in m.parameters():
                    p.copy_(p.to(torch.bfloat16).float())
        else:
            m = AutoModelForCausalLM.from_pretrained(d, dtype=dt).cuda().eval()
        with torch.no_grad():
            logits = m(ids).logits.float()
        lp = torch.log_softmax(logits[0, :-1], -1).gather(-1, ids[0, 1:, None])[:, 0].cpu()
        want = torch.tensor(ref["prompt_logprobs"])
        d_ = (lp - want).abs()
        print(name, dt, "max", f"{d_.max().item():.3e}", "mean", f"{d_.mean().item():.3e}", flush=True)
