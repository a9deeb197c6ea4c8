"""``workbench promote``: the command-line face of ``promote()``.

It serves the source repository with the embedded server for the comparison, promotes, prints
the report and exits 0 when the export was committed, 1 when it was refused.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from workbench.errors import WorkbenchError
from workbench.export.promote import PromoteVerificationError, promote


def _verify(text: str) -> bool | str | None:
    choices: dict[str, bool | str | None] = {"auto": None, "true": True, "false": False}
    choices["warn"] = "warn"
    if text not in choices:
        raise argparse.ArgumentTypeError(f"expected auto, true, false or warn, got '{text}'")
    return choices[text]


def _policy(text: str) -> str | int:
    return int(text) if text.isdigit() else text


def add_promote_parser(commands: Any) -> None:
    """Add the ``promote`` subcommand to the ``workbench`` parser."""
    parser = commands.add_parser(
        "promote", help="export models to a production repository, verified on real Triton"
    )
    flag = parser.add_argument
    flag("--model-repository", required=True, help="the workbench repository to promote from")
    flag("dest", help="production repository: a folder, or an fsspec URI (s3://, gs://)")
    flag("--model", action="append", dest="models", help="model to promote (repeatable)")
    flag("--versions", default="latest", help="latest (default), all or a version number")
    flag("--on-conflict", choices=("new_version", "refuse"), default="new_version")
    flag("--version-policy", type=_policy, default="keep", help="keep, latest, all, specific, N")
    flag("--verify", type=_verify, default=None, help="auto (default), true, false or warn")
    flag("--deploy", choices=("kubernetes",), default=None, help="also write deploy manifests")
    flag("--deploy-dir", default=None, help="where --deploy writes (default: deploy/ by dest)")
    flag("--tritonserver", default=None, help="path of the tritonserver binary to verify with")
    flag("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(handler=run_promote)


#: How ``promote()``'s messages name its keywords -> the flags that set them here.
_CLI_SPELLING = {
    "on_conflict='new_version'": "--on-conflict new_version",
    "verify='warn'": "--verify warn",
    "on_conflict": "--on-conflict",
    "version_policy": "--version-policy",
    "pass models=": "pass --model NAME",
    "versions for": "--versions for",
    # a list of versions is promote()'s alone: the flag takes one word or number
    "'latest', 'all', a number or a list": "latest, all or a version number",
}


def cli_message(message: str) -> str:
    """``promote()``'s message with its keywords spelt as this command's flags."""
    for python, flag in _CLI_SPELLING.items():
        message = message.replace(python, flag)
    return message


def run_promote(args: argparse.Namespace) -> int:
    versions: Any = int(args.versions) if args.versions.isdigit() else args.versions
    try:
        report = promote(
            args.model_repository,
            args.dest,
            models=args.models,
            versions=versions,
            on_conflict=args.on_conflict,
            version_policy=args.version_policy,
            verify=args.verify,
            deploy=args.deploy,
            deploy_dir=args.deploy_dir,
            tritonserver=args.tritonserver,
        )
    except PromoteVerificationError as exc:
        print(exc.report, file=sys.stderr)
        print(f"error: {cli_message(str(exc))}", file=sys.stderr)
        return 1
    except WorkbenchError as exc:
        print(f"error: {cli_message(str(exc))}", file=sys.stderr)
        return 1
    if args.json:
        import json

        print(json.dumps(report.to_dict(), indent=1))
    else:
        print(report)
    return 0


__all__ = ["add_promote_parser", "cli_message", "run_promote"]
