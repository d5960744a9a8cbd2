"""The ``tessera`` dispatcher: every subcommand resolves to a function ``f(argv)``."""

import importlib

import pytest

from flow import tessera


@pytest.mark.parametrize("name", sorted(tessera.SUBCOMMANDS))
def test_subcommand_resolves_to_a_function(name):
    module, function = tessera.SUBCOMMANDS[name][0].split(":")
    assert callable(getattr(importlib.import_module(module), function))


def test_help_lists_every_command(capsys):
    assert tessera.main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in tessera.SUBCOMMANDS:
        assert name in out


def test_unknown_command_is_named(capsys):
    assert tessera.main(["frobnicate"]) == 2
    assert "'frobnicate'" in capsys.readouterr().err


def test_no_command_prints_usage_and_fails(capsys):
    assert tessera.main([]) == 2
    assert "usage: tessera" in capsys.readouterr().out


def test_dispatch_passes_arguments(capsys):
    assert tessera.main(["plan", "plan", "--gemm", "64,64,64", "--preset", "tiny"]) == 0
    assert "64" in capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(tessera.SUBCOMMANDS))
def test_each_commands_usage_names_it_as_tessera_does(name, capsys):
    """``tessera plan --help`` said ``usage: python -m planner``."""
    with pytest.raises(SystemExit) as info:
        tessera.main([name, "--help"])
    assert info.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: tessera {name} ")


def test_plan_options_without_the_plan_command_say_where_they_belong(capsys):
    with pytest.raises(SystemExit):
        tessera.main(["plan", "--gemm", "1024,1024,128"])
    assert "--gemm is an option of the plan command: tessera plan plan --gemm 1024,1024,128" \
        in capsys.readouterr().err
