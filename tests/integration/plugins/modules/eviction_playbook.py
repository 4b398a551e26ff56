# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The playbook both gpu_pod_eviction integration files run: one eviction, its result kept as JSON."""

PLAYBOOK = """
- name: gpu_pod_eviction
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Evict
      gpu_native.fleet.gpu_pod_eviction: {args}
      register: eviction
      ignore_errors: true
    - name: Keep the result
      ansible.builtin.copy:
        content: "{{{{ eviction | to_json }}}}"
        dest: "{out}"
        mode: "0600"
      check_mode: false
"""
