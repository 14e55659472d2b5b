import json

from tandem.cli import main


def test_tandem_sim_prints_a_json_summary(trace_path, capsys):
    assert main(["sim", "--trace", trace_path, "--model", "llama-3.1-8b", "--devices", "1",
                 "--topology", "disagg:1p1d", "--store", "on", "--affinity", "none"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["completed"] == 48 and out["setup"]["topology"] == "disagg:1p1d"
    assert out["setup"]["store"] is True and out["setup"]["affinity"] is False


def test_a_bad_topology_is_a_usage_error(trace_path, capsys):
    assert main(["sim", "--trace", trace_path, "--topology", "disagg:2"]) == 2
    assert "disagg:PpDd" in capsys.readouterr().err


def test_the_agentic_trace_by_name_with_placement_rule_5_off(capsys):
    assert main(["sim", "--trace", "agentic", "--model", "tandem-demo-target", "--accelerator", "cpu",
                 "--topology", "disagg:1p1d", "--no-placement-keep-prefix"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["completed"] == 32 and "prefix" not in out["placement"]
