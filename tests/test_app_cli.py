"""`mystique app`: the command line it builds and its input checks (without starting a server)."""

from __future__ import annotations

import sys

from engine.cli import app as cli_app
from engine.cli.main import build_parser, main


def test_parser_defaults_bind_localhost():
    args = build_parser().parse_args(["app"])
    assert args.port == 8501 and args.address == "localhost" and args.func is cli_app.run
    cmd = cli_app.command(args)
    assert cmd[:4] == [sys.executable, "-m", "streamlit", "run"]
    assert cmd[4].endswith("app/main.py")
    assert cmd[cmd.index("--server.address") + 1] == "localhost"
    assert cmd[cmd.index("--server.headless") + 1] == "true"


def test_port_and_address_are_passed():
    args = build_parser().parse_args(["app", "--port", "9123", "--address", "127.0.0.1"])
    cmd = cli_app.command(args)
    assert cmd[cmd.index("--server.port") + 1] == "9123"
    assert cmd[cmd.index("--server.address") + 1] == "127.0.0.1"


def test_bad_port_is_exit_code_2(capsys):
    assert main(["app", "--port", "70000"]) == 2
    assert "--port must be in 1..65535" in capsys.readouterr().err


def test_streamlit_config_keys_are_valid():
    from pathlib import Path

    import streamlit.config as config
    import tomllib

    conf = tomllib.loads((Path(cli_app.resources.app_main()).parents[1] / ".streamlit" / "config.toml").read_text())
    keys = [f"{section}.{k}" for section, opts in conf.items() for k in opts]
    unknown = [k for k in keys if k not in config._config_options_template]
    assert not unknown, unknown
    assert conf["server"]["address"] == "localhost" and conf["browser"]["gatherUsageStats"] is False
    assert conf["server"]["maxUploadSize"] >= 100
