"""Stream a completion or a chat from the generator over Triton gRPC, printing tokens as they arrive.

    python client/generate.py --chat "What is the capital of France?"
    python client/generate.py "Once upon a time" --max-tokens 64 --temperature 0.8 --seed 1
"""

from __future__ import annotations

import argparse
import json
import queue
import sys
import time

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import np_to_triton_dtype


def tensor(name: str, value: np.ndarray) -> grpcclient.InferInput:
    t = grpcclient.InferInput(name, list(value.shape), np_to_triton_dtype(value.dtype))
    t.set_data_from_numpy(value)
    return t


def build_inputs(args: argparse.Namespace) -> list[grpcclient.InferInput]:
    if args.chat:
        messages = json.dumps([{"role": "user", "content": args.prompt}])
        prompt = tensor("messages", np.array([messages.encode()], dtype=np.object_))
    else:
        prompt = tensor("text_input", np.array([args.prompt.encode()], dtype=np.object_))
    inputs = [
        prompt,
        tensor("max_tokens", np.array([args.max_tokens], dtype=np.int32)),
        tensor("stream", np.array([True])),
        tensor("temperature", np.array([args.temperature], dtype=np.float32)),
    ]
    if args.seed is not None:
        inputs.append(tensor("seed", np.array([args.seed], dtype=np.uint64)))
    if args.stop:
        inputs.append(tensor("stop_words", np.array([s.encode() for s in args.stop], dtype=np.object_)))
    return inputs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("prompt")
    parser.add_argument("--chat", action="store_true", help="send the prompt as one user message of a chat")
    parser.add_argument("--url", default="localhost:8001", help="Triton gRPC address")
    parser.add_argument("--model", default="generator")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.0, help="0 is greedy")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    args = parser.parse_args()

    events: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(args.url)
    client.start_stream(callback=lambda result, error: events.put((result, error)))
    started = time.perf_counter()
    client.async_stream_infer(args.model, build_inputs(args), request_id="1")
    n_out, finish, first = 0, "", None
    while not finish:
        result, error = events.get()
        if error is not None:
            print(f"\nerror: {error}", file=sys.stderr)
            client.stop_stream()
            return 1
        first = first or time.perf_counter()
        print(result.as_numpy("text_output")[0].decode("utf-8"), end="", flush=True)
        n_out += int(result.as_numpy("num_output_tokens")[0])
        finish = result.as_numpy("finish_reason")[0].decode()
        n_in = int(result.as_numpy("num_input_tokens")[0])
    client.stop_stream()
    elapsed = time.perf_counter() - started
    print(f"\n[finish_reason={finish} input_tokens={n_in} output_tokens={n_out} "
          f"first_token={1000 * (first - started):.0f}ms total={elapsed:.2f}s]", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
