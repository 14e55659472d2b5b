"""The `tandem` command: every verb is reachable; a verb imports only its own module."""

import subprocess
import sys

import pytest

from tandem.cli import VERB_MODULES, build_parser


def test_help_lists_every_verb():
    text = build_parser().format_help()
    for verb in VERB_MODULES:
        assert verb in text


@pytest.mark.parametrize("verb", sorted(VERB_MODULES))
def test_each_verb_parses_its_own_help(verb):
    with pytest.raises(SystemExit) as e:
        build_parser(verb).parse_args([verb, "--help"])
    assert e.value.code == 0


def test_the_gateway_does_not_import_torch():
    code = ("import sys\nfrom tandem.cli import build_parser\nbuild_parser('gateway')\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
