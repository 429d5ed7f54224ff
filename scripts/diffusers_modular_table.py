"""Print docs/diffusers.md's table of diffusers' modular pipeline classes, their random draws and
what prenoise does for each, read from the installed diffusers' source (run it in `.venv`:
diffusers 0.42.1).

    .venv/bin/python scripts/diffusers_modular_table.py > /tmp/modular.md
    .venv/bin/python scripts/diffusers_modular_table.py --write   # replace the table in the doc

For every family (a package of `diffusers/modular_pipelines/`) and every `ModularPipeline`
subclass it defines, the class's default blocks (`default_blocks_name`) are built and walked:
every leaf block of every branch (conditional branches and loop bodies included), in order.
For each leaf block, its class's source (its own and its bases' in `diffusers.modular_pipelines`)
and the module-level helpers it calls (two levels deep) are read for:
- `randn_tensor` call sites (the draws prenoise can prepare), and VAE posterior samples
  (`latent_dist.sample(generator)`, `retrieve_latents(...)` not in "argmax" mode: a
  `randn_tensor` call in `diffusers.models.autoencoders.vae`);
- own torch draws (`torch.randn`, `torch.rand`, `torch.multinomial`, `.normal_`, ...), marked
  "generator" when the call names a generator, else "global RNG"; `torch.manual_seed` (it
  reseeds the global RNG); a generator handed to a VAE `decode` (the model draws inside);
- per-step noise: `scheduler.step` called with the caller's generator, or without it (a
  stochastic scheduler there draws from the global RNG).
Status: "planned" where `prenoise.integrations.diffusers.modular.registry.supported()` lists the
class (a missing registry module counts as nothing planned yet), else "plain", with the reason
from `WHY_PLAIN`. The classification reads source text: it is a checklist for review, not a proof.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "diffusers.md"
BEGIN = "<!-- modular table: printed by scripts/diffusers_modular_table.py -->"
END = "<!-- end of the modular table -->"

REGISTRY = "prenoise.integrations.diffusers.modular.registry"

_RANDN_TENSOR = re.compile(r"\brandn_tensor\(")
_POSTERIOR = re.compile(r"\.latent_dist\.sample\(|\bposterior\.sample\(|\bretrieve_latents\(")
_OWN_DRAW = re.compile(
    r"torch\.randn\(|torch\.randn_like\(|torch\.rand\(|torch\.rand_like\(|torch\.randint\("
    r"|torch\.randperm\(|torch\.multinomial\(|torch\.normal\(|\.normal_\(|\.uniform_\("
    r"|\.bernoulli_?\(|\.exponential_\(|torch\.manual_seed\("
)
_DECODE_WITH_GENERATOR = re.compile(r"\.decode\(")
_STEP = re.compile(r"scheduler\.step\(|scheduler\.step,")
_CALL = re.compile(r"(?<!def )\b([A-Za-z_][A-Za-z0-9_]*)\(")
JUDGED_AT_CALL = frozenset({"retrieve_latents"})
"""Helpers whose draw depends on the call's arguments (`sample_mode`): judged where called."""

IMAGE_FAMILIES = frozenset(
    {
        "anima",
        "ernie_image",
        "flux",
        "flux2",
        "flux3",
        "ideogram4",
        "krea2",
        "qwenimage",
        "qwenimage21",
        "stable_diffusion_3",
        "stable_diffusion_xl",
        "z_image",
    }
)
"""Families that make images only: no video or audio noise, so no plan is sought."""

WHY_PLAIN: dict[str, str] = {
    # planned next (initial noise); the row reads "planned" once the registry lists the class
    "MiniMaxH3ModularPipeline": "plan not registered yet",
    "WanModularPipeline": "plan not registered yet",
    "WanImage2VideoModularPipeline": "plan not registered yet",
    "Wan22ModularPipeline": "plan not registered yet",
    "Wan22Image2VideoModularPipeline": "plan not registered yet",
    "Wan22VaceModularPipeline": "plan not registered yet",
    "LTX2ModularPipeline": "plan not registered yet",
    "LTX25ModularPipeline": "plan not registered yet",
    "HunyuanVideo15ModularPipeline": "plan not registered yet",
    # examined, no plan
    "HeliosModularPipeline": (
        "draws per chunk inside the denoise loop, and its image-/video-to-video branches mix "
        "`torch.rand` on the generator with the noise"
    ),
    "HeliosPyramidModularPipeline": (
        "draws per chunk inside the denoise loop, pyramid block noise by `torch.randn` on the "
        "generator"
    ),
    "HeliosPyramidDistilledModularPipeline": (
        "draws per chunk inside the denoise loop, pyramid block noise by `torch.randn` on the "
        "generator"
    ),
    "MiniMaxMusic3ModularPipeline": (
        "its autoregressive step samples tokens from the generator (`torch.multinomial`) "
        "before the noise; noise per chunk inside the loop"
    ),
    "WanAnimate2ModularPipeline": (
        "noise per segment inside the denoise loop; the generator goes to `scheduler.step`"
    ),
    "WanAnimate2DistilledModularPipeline": (
        "noise per segment inside the denoise loop; the generator goes to `scheduler.step`"
    ),
    "EchoModularPipeline": (
        "its few-step loop re-noises video and audio on the generator at every step "
        "(`EchoLoopAfterDenoiser`)"
    ),
}
"""Why a class has no plan; a class of `IMAGE_FAMILIES` not listed here: an image pipeline; any
other: not reviewed yet."""


def _why(family: str, cls_name: str) -> str:
    if cls_name in WHY_PLAIN:
        return WHY_PLAIN[cls_name]
    if family in IMAGE_FAMILIES:
        return "image pipeline: no video/audio noise"
    return "not reviewed yet"


def planned_classes() -> set[str]:
    """What the modular registry supports (dotted paths or class names); empty until it exists."""
    try:
        registry = importlib.import_module(REGISTRY)
    except ModuleNotFoundError as error:
        if error.name is not None and REGISTRY.startswith(error.name):
            return set()  # the registry is not written yet: nothing planned
        raise
    out: set[str] = set()
    for entry in registry.supported():
        if isinstance(entry, type):
            out.add(f"{entry.__module__}.{entry.__qualname__}")
        else:
            out.add(str(entry))
    return out


# --- reading source ---------------------------------------------------------------------------


def _call_text(source: str, start: int) -> str:
    """The text of the call whose name ends at `start` (just before its `(`) or at a `,`."""
    if source[start] != "(":
        return source[start : source.find("\n", start)]
    depth = 0
    for i in range(start, len(source)):
        if source[i] == "(":
            depth += 1
        elif source[i] == ")":
            depth -= 1
            if depth == 0:
                return source[start : i + 1]
    return source[start:]


_MODE = re.compile(r'sample_mode\s*=\s*"(\w+)"')


def _resolved(text: str, block: Any) -> str:
    """`text` with `self.sample_mode` replaced by the block's own value (a VAE encoder block may
    be built with either mode, e.g. Flux's "sample" and Flux Kontext's "argmax")."""
    mode = getattr(block, "sample_mode", None)
    return text.replace("self.sample_mode", f'"{mode}"') if isinstance(mode, str) else text


def _helpers(module: Any, source: str, depth: int = 2) -> list[str]:
    """Sources of the module-level functions of `module` that `source` calls (and theirs); a
    helper taking `sample_mode` gets the mode of its call (given, else its default) spelled out,
    so the `retrieve_latents` calls inside it can be judged."""
    found: list[str] = []
    seen: set[tuple[str, str | None]] = set()
    todo = [(source, depth)]
    while todo:
        text, level = todo.pop()
        if level == 0:
            continue
        for match in _CALL.finditer(text):
            name = match.group(1)
            func = vars(module).get(name)
            if not inspect.isfunction(func) or func.__module__ != module.__name__:
                continue
            if name in JUDGED_AT_CALL:
                continue
            helper = inspect.getsource(func)
            mode: str | None = None
            parameter = inspect.signature(func).parameters.get("sample_mode")
            if parameter is not None:
                given = _MODE.search(_call_text(text, match.end() - 1))
                mode = given.group(1) if given else str(parameter.default)
                helper = helper.replace("sample_mode=sample_mode", f'sample_mode="{mode}"')
            if (name, mode) in seen:
                continue
            seen.add((name, mode))
            found.append(helper)
            todo.append((helper, level - 1))
    return found


def block_source(block: Any) -> str:
    """A leaf block's code: its class and bases in `diffusers.modular_pipelines` families, and the
    module-level helpers they call."""
    parts: list[str] = []
    for klass in type(block).__mro__:
        module = sys.modules.get(klass.__module__)
        if module is None or not klass.__module__.startswith("diffusers.modular_pipelines."):
            continue
        if klass.__module__.count(".") < 3:  # the framework (modular_pipeline.py), not a family
            continue
        text = _resolved(inspect.getsource(klass), block)
        parts.append(text)
        parts.extend(_helpers(module, text))
    return "\n".join(parts)


def _generator_kind(call: str) -> str:
    if "manual_seed" in call:
        return "own seeded generator"
    return "generator" if "generator" in call else "global RNG"


class BlockDraws:
    """What one leaf block draws, read from its class's source."""

    def __init__(self, block: Any) -> None:
        self.name = type(block).__name__
        source = block_source(block)
        self.randn = len(_RANDN_TENSOR.findall(source))
        self.posterior: list[str] = []
        self.own: list[str] = []
        self.step: set[str] = set()
        for match in _POSTERIOR.finditer(source):
            call = _call_text(source, match.end() - 1)
            if "argmax" in call:
                continue  # the posterior's mode: no draw
            mode = ""
            if "sample_mode=" in call and '"sample"' not in call:
                mode = ", unless the mode is argmax"  # a mode this reading could not resolve
            self.posterior.append(f"VAE posterior ({_generator_kind(call)}{mode})")
        for match in _OWN_DRAW.finditer(source):
            call = _call_text(source, match.end() - 1)
            what = match.group(0).rstrip("(").rstrip(",")
            if what == "torch.manual_seed":
                self.own.append("torch.manual_seed (reseeds the global RNG)")
            else:
                self.own.append(f"{what} ({_generator_kind(call)})")
        for match in _DECODE_WITH_GENERATOR.finditer(source):
            call = _call_text(source, match.end() - 1)
            if "generator=" in call:
                self.own.append("VAE decode draws inside the model (generator)")
        for match in _STEP.finditer(source):
            call = _call_text(source, match.end() - 1)
            if match.group(0).endswith(","):
                call = source[match.start() : source.find(")", match.start())]
            self.step.add("generator" if "generator" in call else "global RNG")
        self.posterior = sorted(set(self.posterior))
        self.own = sorted(set(self.own))


# --- walking the pipelines --------------------------------------------------------------------


def leaf_blocks(block: Any) -> Iterator[Any]:
    """Every leaf block under `block`, every branch, in order."""
    if not block.sub_blocks:
        yield block
        return
    for sub in block.sub_blocks.values():
        yield from leaf_blocks(sub)


def families() -> list[str]:
    import diffusers.modular_pipelines as modular

    return sorted(info.name for info in pkgutil.iter_modules(modular.__path__) if info.ispkg)


def pipeline_classes(family: str) -> list[type]:
    import diffusers.modular_pipelines as modular

    package = importlib.import_module(f"{modular.__name__}.{family}")
    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{info.name}")
    module = importlib.import_module(f"{package.__name__}.modular_pipeline")
    return [
        cls
        for cls in vars(module).values()
        if isinstance(cls, type)
        and issubclass(cls, modular.ModularPipeline)
        and cls.__module__ == module.__name__
    ]


Row = tuple[str, str, str, str, str, str, str]


def rows() -> list[Row]:
    import diffusers

    planned = planned_classes()
    out: list[Row] = []
    for family in families():
        try:
            classes = pipeline_classes(family)
        except Exception as error:  # an optional dependency missing
            print(f"skipped {family}: {error!r}", file=sys.stderr)
            continue
        for cls in classes:
            blocks = getattr(diffusers, cls.default_blocks_name)()
            randn: list[str] = []
            own: list[str] = []
            steps: set[str] = set()
            seen: set[tuple[type, object]] = set()
            for leaf in leaf_blocks(blocks):
                key = (type(leaf), getattr(leaf, "sample_mode", None))
                if key in seen:
                    continue
                seen.add(key)
                draws = BlockDraws(leaf)
                if draws.randn:
                    sites = f" ({draws.randn} sites)" if draws.randn > 1 else ""
                    randn.append(f"`{draws.name}`{sites}")
                randn.extend(f"`{draws.name}`: {what}" for what in draws.posterior)
                own.extend(f"`{draws.name}`: {what}" for what in draws.own)
                steps |= draws.step
            path = f"{cls.__module__}.{cls.__qualname__}"
            is_planned = path in planned or cls.__name__ in planned
            out.append(
                (
                    family,
                    cls.__name__,
                    "; ".join(randn) or "—",
                    "; ".join(own) or "—",
                    ", ".join(sorted(steps)) or "—",
                    "planned" if is_planned else "plain",
                    "—" if is_planned else _why(family, cls.__name__),
                )
            )
    return out


def table() -> str:
    lines = [
        "| family | pipeline class | `randn_tensor` call sites (leaf block) | other draws "
        "| `scheduler.step` | prenoise | why plain |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for family, cls, randn, own, step, status, why in rows():
        lines.append(f"| {family} | `{cls}` | {randn} | {own} | {step} | {status} | {why} |")
    return "\n".join(lines)


def replace_in_doc(text: str, new_table: str) -> str:
    """`text` with the part between the markers replaced by `new_table`."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"{DOC}: the markers {BEGIN!r} / {END!r} are missing")
    return text[: start + len(BEGIN)] + "\n" + new_table + "\n" + text[end:]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--write", action="store_true", help="replace the table in docs/diffusers.md"
    )
    args = parser.parse_args(argv)
    new_table = table()
    if args.write:
        DOC.write_text(replace_in_doc(DOC.read_text(), new_table))
    else:
        print(new_table)


if __name__ == "__main__":
    main()
