"""Run in a subprocess by test_diffusers_dev_release.py, with a scratch diffusers first on the path.

    python dev_release_run.py OUT NAME...

For each tiny pipeline NAME (diffusers_tiny.BUILDERS): `enable(pipe)`, one call with
`generator=Generator().manual_seed(SEED)`, its output tensors saved to OUT/NAME.pt and its
`CallReport` in OUT/result.json, with the diffusers version and file this process imported, every
warning on the integration's logger, the modular MiniMax-H3 plan's digest verdict, and
`prenoise doctor`'s diffusers rows.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import torch

SEED = 7


def main(out: Path, names: list[str]) -> None:
    import diffusers
    import diffusers_tiny

    from prenoise.integrations.diffusers import enable, overlapped_call_with_report
    from prenoise.integrations.diffusers.digests import modular_code_problem
    from prenoise.integrations.diffusers.status import diffusers_status

    warnings: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING:
                warnings.append(record.getMessage())

    logging.getLogger("prenoise.integrations.diffusers").addHandler(Keep())
    reports = {}
    for name in names:
        pipe = enable(diffusers_tiny.BUILDERS[name]())
        kwargs = diffusers_tiny.call_kwargs(name)
        generator = torch.Generator("cpu").manual_seed(SEED)
        output, report = overlapped_call_with_report(pipe, generator=generator, **kwargs)
        torch.save(diffusers_tiny.output_tensors(output), out / f"{name}.pt")
        reports[name] = {
            "class": type(pipe).__name__,
            "overlapped": report.overlapped,
            "reason": report.reason,
            "served": report.served,
            "planned": list(report.planned),
            "step_served": report.step_served,
            "generator_state": generator.get_state().tolist(),
        }
    from diffusers.modular_pipelines.minimax_h3.modular_pipeline import MiniMaxH3ModularPipeline

    result = {
        "version": diffusers.__version__,
        "file": diffusers.__file__,
        "reports": reports,
        "warnings": warnings,
        "modular_h3": modular_code_problem(MiniMaxH3ModularPipeline),
        "doctor": dict(diffusers_status().rows()),  # `prenoise doctor`'s diffusers rows
    }
    (out / "result.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
