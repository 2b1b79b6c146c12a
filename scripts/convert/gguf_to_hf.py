"""SmolLM2's GGUF -> a Hugging Face folder, as the hub publishes it (run in .venv-optimum: transformers 5
marks a GGUF-loaded model as quantized and will not save it).

transformers loads and dequantizes the GGUF; the state dict is saved without
the tied lm_head. The GGUF metadata names <|im_start|> as EOS and asks for a
BOS, which the hub's SmolLM2-Instruct does not: its tokenizer settings are
restored (EOS <|im_end|>, no BOS), so the folders made from this one are the
ones users download.
"""

import json
import sys
from pathlib import Path

from transformers import AutoModelForCausalLM, AutoTokenizer

gguf, out = Path(sys.argv[1]), Path(sys.argv[2])
model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype="float32")
tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
model.config.architectures = ["LlamaForCausalLM"]
model.config.eos_token_id = model.generation_config.eos_token_id = 2
model.config.bos_token_id = model.generation_config.bos_token_id = 1
model.save_pretrained(out)  # tied embeddings: lm_head.weight is not written
tokenizer.save_pretrained(out)
settings = out / "tokenizer_config.json"
config = json.loads(settings.read_text())
config.update(eos_token="<|im_end|>", eos_token_id=2, add_bos_token=False)
settings.write_text(json.dumps(config, indent=2))
print(f"gguf_to_hf: {out}")
