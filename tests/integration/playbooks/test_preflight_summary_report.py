# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/preflight_summary.yml (imported by preflight.yml and onboard.yml) writes the report page, through
ansible-playbook: the nodes' preflight_verdict and preflight_outcome facts as the preflight role leaves them, the
page in preflight_report_dir named after the title, nothing with preflight_report_dir "", and the AWX stats keep
their old shape (no per-gate results)."""
import json
import os
import re

from testlib import REPO_ROOT

PLAYBOOK = os.path.join(REPO_ROOT, "playbooks", "preflight_summary.yml")

SETUP = """
- name: Verdicts as the preflight role leaves them
  hosts: gpu_nodes
  gather_facts: false
  tasks:
    - name: Judge the gates
      ansible.builtin.set_fact:
        preflight_node_name: "{{ node }}"
        preflight_verdict: "{{ results | gpu_native.fleet.preflight_verdict(node=node) }}"
        preflight_outcome: "{{ outcome }}"
      when: results is defined

- name: The summary
  ansible.builtin.import_playbook: %s
"""


def inventory(tmp_path):
    hosts = {
        "n1": {"node": "gpu-ok-01", "outcome": "joined",
               "results": [{"gate": gate, "status": "pass", "duration_s": 2.0}
                           for gate in ("spec", "hardware", "kubernetes", "cuda", "serving")]},
        "n2": {"node": "gpu-bad-02", "outcome": "cordoned",
               "results": [{"gate": "spec", "status": "pass", "duration_s": 1.0},
                           {"gate": "hardware", "status": "fail", "duration_s": 9.5,
                            "reasons": ["GPU 4 <0000:83:00.0> is unhealthy"]}]},
        "n3": {},  # unreachable: no verdict
    }
    for values in hosts.values():
        values.update({"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"})
    path = tmp_path / "inventory.json"
    path.write_text(json.dumps({"all": {"children": {"gpu_nodes": {"hosts": hosts}}}}))
    return str(path)


def run(run_playbook, tmp_path, env=None, **variables):
    args = ["-i", inventory(tmp_path), "-e", json.dumps(variables)]
    result = run_playbook(SETUP % PLAYBOOK, None, args, dict({"ANSIBLE_SHOW_CUSTOM_STATS": "true"}, **(env or {})))
    assert result.returncode == 0, result.stdout[-4000:]
    return result.stdout


def test_the_summary_writes_the_report_page(run_playbook, tmp_path):
    out = run(run_playbook, tmp_path, preflight_report_dir=str(tmp_path / "reports"), preflight_summary_title="Onboarding")
    page_path = tmp_path / "reports" / "onboarding.html"
    assert "Report page: %s" % page_path in out
    page = page_path.read_text()
    assert "<title>GPU onboarding</title>" in page and "script-src 'none'" in page
    for node in ("gpu-ok-01", "gpu-bad-02", "n3"):
        assert "<tr><td>%s</td>" % node in page
    assert "hardware: GPU 4 &lt;0000:83:00.0&gt; is unhealthy" in page
    assert "9.5 s" in page and "labelled gpu-native.io/preflight=failed" in page
    assert "no verdict (unreachable or failed)" in page
    # the stats for AWX: the rows as before, without the page's extra keys
    stats = out[out.index("CUSTOM STATS"):]
    assert "gpu-bad-02" in stats and '"results"' not in stats and "label_key" not in stats


def test_an_empty_report_dir_writes_no_page(run_playbook, tmp_path):
    out = run(run_playbook, tmp_path, preflight_report_dir="")
    assert "Report page:" not in out and re.search(r"Write the report page\] \*+\nskipping", out)


def test_the_default_folder_is_where_ansible_playbook_started(run_playbook, tmp_path):
    run(run_playbook, tmp_path, env={"PWD": str(tmp_path)})
    assert "<tr><td>gpu-bad-02</td>" in (tmp_path / "preflight-reports" / "preflight.html").read_text()
