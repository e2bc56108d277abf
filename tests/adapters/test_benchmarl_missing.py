"""gigastep works without BenchMARL: `import gigastep` never imports it, and the BenchMARL
adapter's ImportError names the extra that installs it (runs whether BenchMARL is installed
or not: the subprocess hides it)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.subprocess
def test_gigastep_imports_without_benchmarl_and_the_adapter_names_the_extra():
    code = (
        "import sys\n"
        "import gigastep, gigastep.env, gigastep.opponents\n"
        "assert not [m for m in sys.modules if m.split('.')[0] == 'benchmarl'], 'imported'\n"
        "sys.modules['benchmarl'] = None  # as if not installed\n"
        "try:\n"
        "    import gigastep.benchmarl\n"
        "except ImportError as e:\n"
        "    assert '.[benchmarl]' in str(e) and 'gigastep.benchmarl' in str(e), e\n"
        "else:\n"
        "    raise SystemExit('no ImportError')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
