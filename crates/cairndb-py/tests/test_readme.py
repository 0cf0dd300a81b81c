"""The README's example runs as written (in a temporary directory)."""

import pathlib
import re

from conftest import cairndb_only


@cairndb_only
def test_readme_example(tmp_path):
    readme = pathlib.Path(__file__).parent.parent / "README.md"
    code = re.search(r"```python\n(.*?)```", readme.read_text(), re.S).group(1)
    code = code.replace('"/tmp/example-db"', repr(str(tmp_path / "example-db")))
    exec(compile(code, "README.md", "exec"), {})
