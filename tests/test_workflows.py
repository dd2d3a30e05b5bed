"""The CI recipes in examples/github-actions/: valid GitHub workflows (the schema check-jsonschema
ships), and recipes that gate for real: a time limit on every job, k2conform pinned by commit,
no artifact allowed to go missing, no exit status swallowed, the gate judging what `make
matrix` judges, verify's verdict failing the job."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
RECIPES = sorted((ROOT / "examples" / "github-actions").glob("*.yml"))


def test_every_recipe_is_a_valid_github_workflow():
    done = subprocess.run(
        [Path(sys.executable).parent / "check-jsonschema", "--builtin-schema",
         "vendor.github-workflows", *map(str, RECIPES)],
        capture_output=True, text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert {r.name for r in RECIPES} >= {"engine-pr.yml", "new-release.yml",
                                         "parser-release-gate.yml"}


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_a_recipe_cannot_pass_by_accident(recipe):
    text = recipe.read_text()
    workflow = yaml.safe_load(text)
    assert re.search(r"^  K2CONFORM_COMMIT: [0-9a-f]{40}$", text, re.MULTILINE), "pin a commit"
    assert "--branch" not in text and "|| test $? -eq 1" not in text and "|| true" not in text
    for name, job in workflow["jobs"].items():
        assert 0 < job["timeout-minutes"] <= 60, name
        for step in job["steps"]:
            if step.get("uses", "").startswith("actions/upload-artifact"):
                assert step["with"]["if-no-files-found"] == "error", name


def test_the_gate_runs_make_matrix_and_verify_fails_the_job_on_its_verdict():
    gate = (ROOT / "examples" / "github-actions" / "parser-release-gate.yml").read_text()
    assert "make -C k2conform matrix" in gate
    for name in ("engine-pr.yml", "new-release.yml"):
        workflow = yaml.safe_load((ROOT / "examples" / "github-actions" / name).read_text())
        (job,) = workflow["jobs"].values()
        (verify,) = [s for s in job["steps"] if "k2conform verify" in s.get("run", "")]
        assert "continue-on-error" not in verify and "if" not in verify
