#!/usr/bin/env python3
"""Writes the `vllm serve` command line of the vLLM it runs under, in the
format of test/vllmsim/servecli/<release>.json, to stdout.

Run it inside the release's image (this needs no GPU; it only builds the
argument parser):

    docker run --rm --entrypoint python3 -i vllm/vllm-openai:v0.31.0 - v0.31.0 \
        < hack/vllm-serve-args.py > test/vllmsim/servecli/v0.31.0.json

Every option of the parser is written (the checked-in v0.30.0 file is a
hand-read subset, see its "scope"). A type the simulator does not know
(vLLM's parsers of JSON, lists, optional values) is written as "str":
the simulator then checks the option's name, not its value.
"""

import argparse
import json
import sys

from vllm.entrypoints.openai.cli_args import make_arg_parser

try:  # where FlexibleArgumentParser lives moved over the releases
    from vllm.utils.argparse_utils import FlexibleArgumentParser
except ImportError:
    from vllm.utils import FlexibleArgumentParser

release = sys.argv[1]
parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))

KNOWN_TYPES = {"int", "float", "str", "human_readable_int", "human_readable_int_or_auto"}

flags = []
positional = None
for action in parser._actions:
    if isinstance(action, argparse._HelpAction):
        continue
    if not action.option_strings:
        positional = action.dest
        continue
    names = [n for n in action.option_strings if not n.startswith("--no-")]
    flag = {"names": names}
    if isinstance(action, argparse.BooleanOptionalAction):
        flag["action"] = "boolean_optional"
    elif isinstance(action, argparse._StoreTrueAction):
        flag["action"] = "store_true"
    elif action.nargs == 0:
        # another switch (store_const, version): takes no value
        flag["action"] = "store_true"
    else:
        name = getattr(action.type, "__name__", "str")
        flag["type"] = name if name in KNOWN_TYPES else "str"
        if action.nargs in ("+", "*"):
            flag["nargs"] = "+"
        if action.choices is not None:
            flag["choices"] = [str(c) for c in action.choices]
    flags.append(flag)

json.dump(
    {
        "release": release,
        "source": {
            "repository": "https://github.com/vllm-project/vllm",
            "tag": release,
            "files": [
                "vllm/entrypoints/openai/cli_args.py (make_arg_parser)",
                "vllm/engine/arg_utils.py (EngineArgs.add_cli_args)",
            ],
            "rendered": "written by hack/vllm-serve-args.py from the parser of the installed vllm",
            "scope": "every option of vllm serve",
        },
        "prog": "vllm serve",
        "positional": positional or "model_tag",
        "flags": flags,
    },
    sys.stdout,
    indent=2,
)
sys.stdout.write("\n")
