"""onnxruntime-genai's Generator and og.Engine on one model folder, driven over stdin/stdout (run in .venv-genai).

One JSON command per line: {"generator": ids, "tokens": n} runs one greedy Generator; {"engine": [ids...],
"tokens": n} submits every prompt to og.Engine at once and runs it until all are done. Each answer holds the
new tokens and the wall seconds. The first line out describes the runtime and its configuration.
"""

import json
import sys
import time

import numpy as np
import onnxruntime_genai as og

TOKEN, FINISHED = int(og.EngineEventFlags.TOKEN.value), int(og.EngineEventFlags.TURN_FINISHED.value)


def generator(model, ids: list[int], tokens: int) -> list[int]:
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(ids) + tokens, min_length=len(ids) + tokens, do_sample=False)
    gen = og.Generator(model, params)
    gen.append_tokens(ids)
    while not gen.is_done():
        gen.generate_next_token()
    return [int(t) for t in gen.get_sequence(0)[len(ids):]]


def batch(engine, prompts: list[list[int]], tokens: int) -> list[list[int]]:
    buffer = engine.create_event_buffer(256)
    requests, out = [], {}
    for ids in prompts:
        request = engine.create_request()
        options = og.TurnOptions(request)
        options.set_do_sample(False)
        options.set_max_generated_tokens(tokens)
        options.set_min_generated_tokens(tokens)
        request.begin_turn(np.array(ids, np.int32), options)
        requests.append(request)
        out[id(request)] = []
    index = {id(r): i for i, r in enumerate(requests)}
    results = [[] for _ in prompts]
    while engine.has_pending_requests():
        for event in engine.run(buffer):
            if int(event.flags.value) & TOKEN:
                results[index[id(event.request)]].append(int(event.token))
    for request in requests:
        request.close()
    return results


def main() -> None:
    model = og.Model(sys.argv[1])
    engine = og.Engine(model)
    caps = engine.get_capabilities()
    config = json.load(open(f"{sys.argv[1]}/genai_config.json"))
    print(json.dumps({"version": og.__version__ if hasattr(og, "__version__") else "0.18.0",
                      "engine": config.get("engine", {}), "max_batch": caps.configured_max_batch_size,
                      "session_options": config["model"]["decoder"]["session_options"]}), flush=True)
    for line in sys.stdin:
        job = json.loads(line)
        start = time.perf_counter()
        if "generator" in job:
            result = generator(model, job["generator"], job["tokens"])
        else:
            result = batch(engine, job["engine"], job["tokens"])
        print(json.dumps({"seconds": time.perf_counter() - start, "tokens": result}), flush=True)


if __name__ == "__main__":
    main()
