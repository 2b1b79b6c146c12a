"""A 2-layer random llama as a Hugging Face folder around a given tokenizer folder (run in .venv-genai).

The foreign-format twins of the engine's tiny test model: onnxruntime-genai's
builder and Optimum turn this folder into their own layouts.
"""

import shutil
import sys
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

tokenizer, out, seed = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
torch.manual_seed(seed)
config = LlamaConfig(vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
                     rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2,
                     architectures=["LlamaForCausalLM"])
model = LlamaForCausalLM(config).eval()
with torch.no_grad():  # larger than the default init, so greedy outputs vary with the prompt
    for p in model.parameters():
        if p.dim() == 2:
            p.normal_(0.0, 1.0 / p.shape[1] ** 0.5)
model.save_pretrained(out)
for name in ("tokenizer.json", "tokenizer_config.json"):
    shutil.copy(tokenizer / name, out / name)
print(f"tiny_hf: {out}")
