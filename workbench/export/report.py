"""``PromoteReport``: what a promote did, as text (terminal), HTML (notebook) and JSON (disk)."""

from __future__ import annotations

import html
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from workbench._types import StrPath
from workbench.export.verify import FAILED, MISMATCH, PASSED, ModelCheck

REPORT_NAME = "PROMOTE_REPORT.json"
_COLUMNS = ("model", "backend", "versions", "action", "verification", "detail")


@dataclass
class PromotedModel:
    """One model in the export."""

    model: str
    backend: str
    #: source version -> destination version
    versions: dict[int, int]
    #: "added" (new at the destination) or "new version" (it was there already)
    action: str
    removed_parameters: list[str] = field(default_factory=list)
    check: ModelCheck | None = None


@dataclass
class PromoteReport:
    """The outcome of ``promote()``; ``ok`` is False when verification found a difference."""

    dest: str
    source: str
    models: list[PromotedModel]
    created: str
    verify_mode: str
    triton_version: str = ""
    manifest: str = ""
    deploy_files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    committed: bool = False

    @property
    def checks(self) -> list[ModelCheck]:
        return [model.check for model in self.models if model.check is not None]

    @property
    def ok(self) -> bool:
        """No model failed or mismatched (unverifiable ones are reported, not failures)."""
        return all(check.status not in (MISMATCH, FAILED) for check in self.checks)

    @property
    def verified(self) -> list[str]:
        return [c.model for c in self.checks if c.status == PASSED]

    def rows(self) -> list[dict[str, str]]:
        rows = []
        for model in self.models:
            check = model.check
            versions = ", ".join(f"{src}->{dst}" for src, dst in sorted(model.versions.items()))
            rows.append(
                {
                    "model": model.model,
                    "backend": model.backend,
                    "versions": versions,
                    "action": model.action,
                    "verification": check.status if check else "not run",
                    "detail": check.detail if check else "",
                }
            )
        return rows

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["ok"] = self.ok
        for model in data["models"]:
            model["versions"] = {str(k): v for k, v in model["versions"].items()}
        return data

    def save(self, path: StrPath) -> Path:
        target = Path(path)
        target.write_text(json.dumps(self.to_dict(), indent=1), encoding="utf-8")
        return target

    def _summary(self) -> str:
        state = "promoted" if self.committed else "NOT promoted"
        triton = f" on tritonserver {self.triton_version}" if self.triton_version else ""
        if not self.ok:
            verdict = f"verification FAILED{triton}"
        elif self.verified:
            verdict = f"{len(self.verified)} of {len(self.models)} verified{triton}"
        else:  # nothing could be checked: never say "passed"
            verdict = "not verified on real Triton"
        return f"{state} {len(self.models)} model(s) to {self.dest}; {verdict}"

    def __str__(self) -> str:
        widths = {c: max([len(c), *(len(r[c]) for r in self.rows())]) for c in _COLUMNS}
        lines = [self._summary(), "  ".join(c.ljust(widths[c]) for c in _COLUMNS)]
        lines += ["  ".join(r[c].ljust(widths[c]) for c in _COLUMNS) for r in self.rows()]
        lines += [f"manifest: {self.manifest}"] if self.manifest else []
        lines += [f"deploy: {path}" for path in self.deploy_files]
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(line.rstrip() for line in lines)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{c}</th>" for c in _COLUMNS)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(row[c])}</td>" for c in _COLUMNS) + "</tr>"
            for row in self.rows()
        )
        colour = "green" if self.ok and self.committed else "red"
        extra = "".join(
            f"<li>{html.escape(text)}</li>"
            for text in [
                *(f"manifest: {self.manifest}" for _ in [0] if self.manifest),
                *(f"deploy: {path}" for path in self.deploy_files),
                *self.notes,
            ]
        )
        return (
            f"<b style='color:{colour}'>{html.escape(self._summary())}</b>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
            + (f"<ul>{extra}</ul>" if extra else "")
        )


__all__ = ["REPORT_NAME", "PromoteReport", "PromotedModel"]
