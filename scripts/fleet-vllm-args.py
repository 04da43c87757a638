#!/usr/bin/env python3
"""Parses an engine container's command line with vLLM's own `vllm serve` parser.

Reads a JSON array of command lines on stdin, each the container's command followed by its args
(as the condisagg-fleet chart renders them: ["vllm", "serve", MODEL, "--flag", ...]), parses each with
the parser `vllm serve` builds (vllm.entrypoints.cli.serve.ServeSubcommand), runs serve's own
validation and AsyncEngineArgs.from_cli_args (which turns --kv-events-config and
--kv-transfer-config into vLLM's KVEventsConfig and KVTransferConfig), and prints what vLLM
resolved as a JSON array, one object per command line (vLLM is imported once: about 25 s here).
An unknown flag or config key exits 2 with vLLM's message. Nothing is loaded or started: no
model, no network.

Run with the venv of scripts/vllm-venv.sh (deploy/helm TestFleetVLLMParsesArgs does).
"""
import json
import sys


def main() -> int:
    lines = json.load(sys.stdin)
    for argv in lines:
        if argv[:2] != ["vllm", "serve"]:
            print(f"fleet-vllm-args: command {argv[:2]} is not vllm serve", file=sys.stderr)
            return 2
    json.dump([resolve(argv) for argv in lines], sys.stdout, default=str)
    print()
    return 0


def resolve(argv: list) -> dict:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm")
    sub = parser.add_subparsers(dest="subparser", required=True)
    cmd = ServeSubcommand()
    cmd.subparser_init(sub)
    args = parser.parse_args(argv[1:])  # exits 2 with vLLM's message on an unknown flag
    cmd.validate(args)
    if getattr(args, "model_tag", None) is not None:  # what ServeSubcommand.cmd does first
        args.model = args.model_tag
    ea = AsyncEngineArgs.from_cli_args(args)
    kve, kvt = ea.kv_events_config, ea.kv_transfer_config
    out = {
        "model": ea.model,
        "served_model_name": ea.served_model_name,
        "host": args.host,
        "port": args.port,
        "block_size": ea.block_size,
        "max_model_len": ea.max_model_len,
        "max_num_batched_tokens": ea.max_num_batched_tokens,
        "data_parallel_size": ea.data_parallel_size,
        "enable_prompt_tokens_details": args.enable_prompt_tokens_details,
        "kv_events_config": None if kve is None else {
            "enable_kv_cache_events": kve.enable_kv_cache_events, "publisher": kve.publisher,
            "endpoint": kve.endpoint, "replay_endpoint": kve.replay_endpoint, "topic": kve.topic},
        "kv_transfer_config": None if kvt is None else {
            "kv_connector": kvt.kv_connector, "kv_role": kvt.kv_role,
            "kv_load_failure_policy": getattr(kvt, "kv_load_failure_policy", None)},
    }
    return out


if __name__ == "__main__":
    sys.exit(main())
