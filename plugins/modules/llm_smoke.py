#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpu_native.fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: llm_smoke
short_description: Check that an OpenAI-compatible LLM server emits tokens
version_added: 0.2.0
author:
  - gpu_native.fleet contributors (@gpu-native)
description:
  - The serving gate of the preflight. Asks an OpenAI-compatible server (vLLM, SGLang, TGI, llama.cpp) for a
    completion and passes only when it returns at least O(min_tokens) completion tokens B(and) non-empty text
    within O(timeout).
  - Tokens are counted from C(usage.completion_tokens). A server that sends no usage is asked again with
    C(stream=true) and its streamed content chunks are counted (or its final usage chunk, when it sends one).
  - A refused connection, an HTTP error, malformed JSON, an empty completion or a timeout is a one-line reason in
    RV(reasons), never a traceback.
  - It runs wherever the task runs (usually the controller, or a host that can reach the pod's IP). The request
    ignores proxy settings. It changes nothing and runs in check mode too.
  - The API key goes only to O(base_url). A redirect is never followed (it fails the check, naming its target),
    so neither the key nor the prompt reaches another server. Messages never repeat the key or credentials in a URL.
extends_documentation_fragment:
  - gpu_native.fleet.attributes
attributes:
  check_mode:
    support: full
    description: The probe only reads, so check mode runs it in full.
  diff_mode:
    support: none
    description: Nothing is changed, so there is nothing to diff.
  platform:
    support: full
    platforms: posix
options:
  base_url:
    description: The server's OpenAI base URL as OpenAI clients take it, ending in C(/v1).
    type: str
    required: true
  model:
    description: Model to ask. Default is the first model C(/v1/models) lists.
    type: str
  prompt:
    description: The prompt (or the user message with O(api=chat)).
    type: str
    default: Write one sentence about GPUs.
  min_tokens:
    description: Completion tokens needed to pass.
    type: int
    default: 8
  max_tokens:
    description: C(max_tokens) sent with the request. Default is twice O(min_tokens), at least 32.
    type: int
  timeout:
    description:
      - Seconds for the whole check, all requests together. One deadline covers every step of every request
        (connect, TLS, headers, body, stream, keep-alive comments, C(100 Continue) answers), so a server that answers
        byte by byte fails the check at O(timeout), not after many per-read timeouts.
      - Should a step block where no socket timeout reaches (name resolution), the task fails 5 seconds later.
    type: int
    default: 60
  api:
    description: V(completions) posts to C(/completions); V(chat) to C(/chat/completions).
    type: str
    choices: [completions, chat]
    default: completions
  api_key:
    description:
      - "Sent as C(Authorization: Bearer <api_key>) when set."
      - Printable ASCII without spaces, at most 4096 characters; a key with a space, a control character or a pasted
        newline is refused before anything is sent, with a message that does not repeat it.
    type: str
  fail_on_failure:
    description: Fail the task when the check did not pass. With V(false) the verdict is only returned.
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: The pod on the node emits tokens
  gpu_native.fleet.llm_smoke:
    base_url: "http://{{ pod_ip }}:8000/v1"
    min_tokens: 8
    timeout: 120
  delegate_to: localhost

- name: Chat API, named model, verdict only
  gpu_native.fleet.llm_smoke:
    base_url: http://10.0.0.5:8000/v1
    model: Qwen/Qwen2.5-0.5B-Instruct
    api: chat
    fail_on_failure: false
  register: serving
"""

RETURN = r"""
status:
  description:
    - The check result (docs/DEVELOPING.md, "How a check result looks"). V(pass) when enough tokens and
      non-empty text came back in time, V(fail) otherwise (RV(reasons) says why), V(error) when the task's own
      deadline ended the probe.
  returned: always
  type: str
  choices: [pass, fail, skip, error]
  sample: pass
passed:
  description: Whether enough tokens and non-empty text came back in time (RV(status=pass)); kept as an extra.
  returned: always
  type: bool
completion_tokens:
  description: Completion tokens counted.
  returned: always
  type: int
  sample: 11
token_source:
  description: Where the count came from, V(usage), V(stream_usage) or V(stream_chunks); null when no answer came.
  returned: always
  type: str
text:
  description: The completion text (at most 2000 characters).
  returned: always
  type: str
latency_ms:
  description: Milliseconds from the first request to the answer; null when no answer came.
  returned: always
  type: int
model:
  description: The model asked.
  returned: always
  type: str
reasons:
  description: One line per reason the check did not pass.
  returned: always
  type: list
  elements: str
  sample: ["http://10.0.0.5:8000/v1 refused the connection (is the server listening?)"]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpu_native.fleet.plugins.module_utils._common import check_result
from ansible_collections.gpu_native.fleet.plugins.module_utils._common.http_deadline import TaskDeadlineExceeded, task_deadline
from ansible_collections.gpu_native.fleet.plugins.module_utils.serving.llm_probe import DEFAULT_PROMPT, LlmProbeError, probe

# Seconds past timeout after which the task fails wherever it blocks (the probe's own deadline ends it first).
BACKSTOP_S = 5


def main():
    module = AnsibleModule(
        argument_spec=dict(
            base_url=dict(type="str", required=True),
            model=dict(type="str"),
            prompt=dict(type="str", default=DEFAULT_PROMPT),
            min_tokens=dict(type="int", default=8, no_log=False),
            max_tokens=dict(type="int", no_log=False),
            timeout=dict(type="int", default=60),
            api=dict(type="str", choices=["completions", "chat"], default="completions"),
            api_key=dict(type="str", no_log=True),
            fail_on_failure=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if params["max_tokens"] is not None and not 1 <= params["max_tokens"] <= 8192:
        module.fail_json(msg="max_tokens is %d. Fix: pass 1 to 8192." % params["max_tokens"])
    try:
        with task_deadline((params["timeout"] or 0) + BACKSTOP_S, "the LLM server did not answer within timeout %s s "
                           "(+%s s); check that base_url resolves and answers, then run again"
                           % (params["timeout"], BACKSTOP_S)):
            result = probe(params["base_url"], model=params["model"], prompt=params["prompt"],
                           min_tokens=params["min_tokens"], max_tokens=params["max_tokens"], timeout=params["timeout"],
                           api=params["api"], api_key=params["api_key"])
    except LlmProbeError as exc:
        module.fail_json(msg=str(exc))
    except TaskDeadlineExceeded as exc:
        module.fail_json(msg=str(exc), changed=False, **check_result.result(check_result.ERROR, [str(exc)],
                                                                            passed=False))
    result.setdefault("reasons", [])
    result["status"] = check_result.status_of(result["passed"])
    result = check_result.result(**result)
    if not result["passed"] and params["fail_on_failure"]:
        module.fail_json(msg="LLM smoke test failed: %s" % "; ".join(result["reasons"]), changed=False, **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
