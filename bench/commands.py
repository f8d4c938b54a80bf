"""``speclsp bench``: the measurement commands, registered with the CLI through the ``speclsp.commands``
entry point (see :func:`lsp_server.cli.build_parser`)."""

from __future__ import annotations

from bench import (
    agreement,
    cuts,
    decode,
    edits,
    fim_eval,
    first_answer,
    keystrokes,
    lsp,
    peers,
    prompt_gate,
    scale_out,
    step_cost_grid,
    typing_fuzz,
)


def add_parser(commands) -> None:
    """Register ``speclsp bench cuts|lsp|decode|edits|scale-out|peers|prompt-gate|step-cost|agreement|fim-eval|fuzz``
    on the CLI's argparse subparsers object."""
    bench = commands.add_parser("bench", help="measurements on this machine")
    kinds = bench.add_subparsers(dest="bench", required=True)
    cuts.add_parser(kinds)
    lsp_parser = lsp.add_parser(kinds)
    keystrokes.add_arguments(lsp_parser)
    first_answer.add_arguments(lsp_parser)
    decode.add_parser(kinds)
    edits.add_parser(kinds)
    scale_out.add_parser(kinds)
    peers.add_parser(kinds)
    prompt_gate.add_parser(kinds)
    step_cost_grid.add_parser(kinds)
    agreement.add_parser(kinds)
    fim_eval.add_parser(kinds)
    typing_fuzz.add_parser(kinds)
