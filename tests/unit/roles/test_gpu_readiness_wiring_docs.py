# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""docs/gpu_readiness.md "Wiring node_exporter and Prometheus" quotes what the Molecule scenario gpu_readiness runs:
the node_exporter ARGS line, prometheus.yml (scrape and rule settings) and the rules-file variables."""
import os
import re

import jinja2
import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SCENARIO = os.path.join(REPO, "molecule", "gpu_readiness")


def read(*parts):
    with open(os.path.join(REPO, *parts)) as handle:
        return handle.read()


def section():
    text = read("docs", "gpu_readiness.md")
    start = text.index("## Wiring node_exporter and Prometheus")
    return text[start:text.index("\n## ", start + 1)]


def code_blocks(text, language):
    return re.findall(r"```%s\n(.*?)```" % language, text, re.DOTALL)


def scenario_vars():
    return yaml.safe_load(read("molecule", "gpu_readiness", "molecule.yml"))["provisioner"]["inventory"]["group_vars"]["all"]


def test_prometheus_yml_in_the_docs_is_the_scenarios():
    variables = scenario_vars()
    hostvars = dict(("h%d" % i, {"ansible_facts": {"default_ipv4": {"address": "10.88.0.%d" % (i + 2)}}})
                    for i in range(2))
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters["dirname"] = os.path.dirname
    rendered = yaml.safe_load(env.from_string(read("molecule", "gpu_readiness", "prometheus.yml.j2")).render(
        groups={"gpu_nodes": sorted(hostvars)}, hostvars=hostvars, **variables))
    documented = [yaml.safe_load(block) for block in code_blocks(section(), "yaml")]
    config = [block for block in documented if "scrape_configs" in block]
    assert config == [rendered]
    rules_dir = os.path.dirname(variables["gpu_readiness_prometheus_rules_file"])
    assert rendered["rule_files"] == [rules_dir + "/*.yml"]


def test_node_exporter_args_in_the_docs_are_the_scenarios():
    prepare = yaml.safe_load(read("molecule", "gpu_readiness", "prepare.yml"))
    lines = [task["ansible.builtin.lineinfile"]["line"] for play in prepare for task in play["tasks"]
             if "ansible.builtin.lineinfile" in task]
    assert lines == [code_blocks(section(), "sh")[0].strip()]


def test_role_example_in_the_docs_uses_the_scenarios_settings():
    variables = scenario_vars()
    example = [block for block in (yaml.safe_load(b) for b in code_blocks(section(), "yaml"))
               if isinstance(block, list)][0][0]["roles"][0]["vars"]
    for name in ("gpu_readiness_prometheus_rules_file", "gpu_readiness_prometheus_service"):
        assert example[name] == variables[name]
