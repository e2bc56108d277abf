"""Environment variables that switch something on or off (gigastep._util.environ.flag): each
accepts its documented values and refuses any other with an error naming the variable, the
value and the accepted values (docs/development.md, "Inputs and their checks")."""

from __future__ import annotations

import pytest

from gigastep import cli
from gigastep._util.environ import FALSE, TRUE, flag
from gigastep.game import _native

ON = [*TRUE, "TRUE", " Yes ", "On"]
OFF = [*FALSE, "FALSE", " No ", "Off"]
REFUSED = ["2", "maybe", "enable", "disabled", "-1", "ja", "y", "n"]


@pytest.mark.parametrize("value", ON + OFF + ["", "  "])
def test_a_flag_reads_its_documented_values(value, monkeypatch):
    monkeypatch.setenv("GIGASTEP_TEST_FLAG", value)
    want = None if not value.strip() else value.strip().lower() in TRUE
    for default in (False, True):
        assert flag("GIGASTEP_TEST_FLAG", default) is (default if want is None else want)


def test_an_unset_flag_is_its_default(monkeypatch):
    monkeypatch.delenv("GIGASTEP_TEST_FLAG", raising=False)
    assert flag("GIGASTEP_TEST_FLAG", True) is True
    assert flag("GIGASTEP_TEST_FLAG", False) is False


@pytest.mark.parametrize("value", REFUSED)
def test_gigastep_native_refuses_an_unknown_value(value, monkeypatch):
    monkeypatch.setenv("GIGASTEP_NATIVE", value)
    with pytest.raises(ValueError) as caught:
        _native.enabled()
    message = str(caught.value)
    assert f"GIGASTEP_NATIVE={value!r}" in message
    assert "1, true, yes, on (on) or 0, false, no, off (off)" in message


@pytest.mark.parametrize("value, on", [(v, True) for v in ON] + [(v, False) for v in OFF])
def test_gigastep_native_accepts_its_documented_values(value, on, monkeypatch):
    monkeypatch.setenv("GIGASTEP_NATIVE", value)
    assert _native.enabled() is on
    if not on:
        assert _native.status() == {"native": False, "detail": "disabled by GIGASTEP_NATIVE"}


@pytest.mark.parametrize("value", REFUSED)
def test_gigastep_debug_refuses_an_unknown_value_in_one_line(value, monkeypatch, capsys):
    monkeypatch.setenv("GIGASTEP_DEBUG", value)
    assert cli.main(["list"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip().splitlines() == [
        f"gigastep: error: the environment variable GIGASTEP_DEBUG={value!r} is not one of the "
        "accepted values: 1, true, yes, on (on) or 0, false, no, off (off), in any case; unset "
        "or empty means off"
    ]


@pytest.mark.parametrize("value", OFF + [""])
def test_gigastep_debug_off_keeps_the_one_line_error(value, monkeypatch, capsys):
    monkeypatch.setenv("GIGASTEP_DEBUG", value)  # "0" used to mean on
    assert cli.main(["info", "missing.toml"]) == 2
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("value", ON)
def test_gigastep_debug_on_raises_the_error_itself(value, monkeypatch):
    monkeypatch.setenv("GIGASTEP_DEBUG", value)
    with pytest.raises(cli.CommandError, match="no scenario file 'missing.toml'"):
        cli.main(["info", "missing.toml"])
