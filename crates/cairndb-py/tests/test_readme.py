"""The READMEs' examples (this package's and the repository's) run as
written, in a temporary directory."""

import pathlib
import re

from conftest import cairndb_only


def run_example(readme, path, tmp_path):
    code = re.search(r"```python\n(.*?)```", readme.read_text(), re.S).group(1)
    assert path in code, f"the example in {readme} no longer opens {path}"
    code = code.replace(path, str(tmp_path / "example-db"))
    exec(compile(code, str(readme), "exec"), {})


@cairndb_only
def test_readme_example(tmp_path):
    readme = pathlib.Path(__file__).parent.parent / "README.md"
    run_example(readme, "/tmp/example-db", tmp_path)


@cairndb_only
def test_repository_readme_example(tmp_path):
    readme = pathlib.Path(__file__).parent.parent.parent.parent / "README.md"
    run_example(readme, "/tmp/cairndb-example-py", tmp_path)
