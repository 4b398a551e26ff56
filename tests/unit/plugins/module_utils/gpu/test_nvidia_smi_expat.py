# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""parse_query_xml builds its tree with expat directly: the same tree ElementTree gave (issue 32, item 3).

The reference below is the parser's code before the change (ElementTree.fromstring, then the element walk), kept
here to compare with on the real and constructed captures and on XML features nvidia-smi does not print."""
import os
from xml.etree import ElementTree

import pytest

from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu import nvidia_smi as smi

from gpu_fixtures import text
from testlib import modules_loaded_by

FIXTURES = ["01_nvsmi_qx_a100_sxm4_80gb_mig_enabled.xml.txt", "constructed_nvsmi_qx_h100_sxm_x8_healthy.xml.txt",
            "constructed_nvsmi_qx_a40_x8_gpu4_unknown_error.xml.txt"]


def _reference(text_):
    """(tree as nested tuples, gpu ids) the ElementTree way, or the error message."""
    try:
        root = ElementTree.fromstring(smi._strip_doctype(text_[text_.find("<"):]).strip())
    except ElementTree.ParseError as exc:
        return "not valid XML: %s" % exc

    def tree(element):
        return (element.tag, None if len(element) else (element.text or ""),
                tuple(tree(child) for child in element if isinstance(child.tag, str)))
    return tree(root), [e.get("id") for e in root.findall("gpu")]


def _ours(text_):
    builder = smi._XmlTree()
    try:
        root = builder.parse(smi._strip_doctype(text_[text_.find("<"):]).strip())
    except smi.NvidiaSmiParseError as exc:
        return str(exc).split("nvidia-smi -q -x output is ", 1)[1]

    def tree(node):
        return (node.key, node.value, tuple(tree(child) for child in node.children))
    return tree(root), builder.gpu_ids


def _variants():
    base = text(FIXTURES[1])
    yield "comment-cdata-refs", base.replace("<product_name>", "<!-- c --><product_name><![CDATA[x<y]]>&amp;&#65;", 1)
    yield "namespace", base.replace("<nvidia_smi_log>", '<nvidia_smi_log xmlns:q="urn:x"><q:foo>1</q:foo>', 1)
    yield "processing-instruction", base.replace("<product_name>", "<?pi x?><product_name>", 1)
    yield "leaf-becomes-section", base.replace("</product_name>", "<sub>1</sub></product_name>", 1)
    yield "empty-gpus", "<nvidia_smi_log><attached_gpus>2</attached_gpus><gpu id='0:18:0.0'/><gpu/></nvidia_smi_log>"
    for bad in ("<nvidia_smi_log><gpu>", "<nvidia_smi_log>&foo;</nvidia_smi_log>", "<a></b>",
                "<nvidia_smi_log/>junk", "<q:x/>"):
        yield bad, bad


@pytest.mark.parametrize("name", FIXTURES)
def test_the_captures_give_elementtrees_tree(name):
    assert _ours(text(name)) == _reference(text(name))


@pytest.mark.parametrize("name,doc", list(_variants()))
def test_xml_features_and_errors_as_elementtree(name, doc):
    assert _ours(doc) == _reference(doc), name


@pytest.mark.parametrize("levels,refused", [(32, False), (33, False), (34, True)])
def test_the_depth_bound_is_where_it_was(levels, refused):
    """Refused when an element sits below 33 levels (the root at 0), as the element walk refused it."""
    doc = "<nvidia_smi_log>" + "<a>" * levels + "x" + "</a>" * levels + "</nvidia_smi_log>"
    if refused:
        with pytest.raises(smi.NvidiaSmiParseError, match="nests deeper than 32 levels"):
            smi.parse_query_xml(doc)
    else:
        smi.parse_query_xml(doc)


@pytest.mark.parametrize("doc,message", [
    ('<!doctype nvidia_smi_log SYSTEM "x"><nvidia_smi_log/>', None),
    ('<!DocType nvidia_smi_log [<!ENTITY a "b">]><nvidia_smi_log/>', "entities"),
    ('<nvidia_smi_log/><!entity a "b">', "entities"),
    ('<!DOCTYPE nvidia_smi_log SYSTEM "x"', "unterminated DOCTYPE"),
    ('<!DOCTYPE nvidia_smi_log [<!ELEMENT a ANY>]><nvidia_smi_log/>', "internal DTD subset"),
])
def test_doctype_and_entities_judged_as_the_patterns_judge_them(doc, message):
    """Any case of DOCTYPE/ENTITY still goes through the case-insensitive patterns."""
    if message is None:
        assert smi.parse_query_xml(doc)["gpus"] == []
    else:
        with pytest.raises(smi.NvidiaSmiParseError, match=message):
            smi.parse_query_xml(doc)


def test_parsing_loads_no_elementtree():
    here = os.path.dirname(os.path.abspath(__file__))
    fixture = os.path.join(here, "..", "..", "..", "..", "fixtures", "nvidia", FIXTURES[1])
    assert modules_loaded_by(
        "from ansible_collections.gpu_native.fleet.plugins.module_utils.gpu import nvidia_smi; "
        "nvidia_smi.parse_query_xml(open(sys.argv[2]).read())", ("xml.etree", "xml.etree.ElementTree", "weakref"),
        fixture) == []
