#!/usr/bin/python3
"""Generates the small control-flow models the unit tests use (tests/data/*.onnx; committed, so
the tests need no Python): Loops with a huge trip count (run budget, cancellation) and subgraphs
nested two levels deep that read values of the main graph (outer-scope resolution).

    /usr/bin/python3 tests/data/gen_control_models.py    # rewrites tests/data/*.onnx
"""
import os
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def save(graph, name):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="kiln-tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(HERE, name))


def counting_body():
    """Loop body: v_out = v + 1, the condition passes through."""
    return helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"]), helper.make_node("Add", ["v", "one"], ["v_out"])],
        "body",
        [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("c", B, []),
         helper.make_tensor_value_info("v", F, [1])],
        [helper.make_tensor_value_info("c_out", B, []), helper.make_tensor_value_info("v_out", F, [1])],
        [numpy_helper.from_array(np.array([1.0], np.float32), "one")])


def loop_model(name, trip_is_input):
    inputs = [helper.make_tensor_value_info("x", F, [1])]
    inits = [numpy_helper.from_array(np.array(True), "cond")]
    if trip_is_input:
        inputs.append(helper.make_tensor_value_info("trips", I64, []))
    else:
        inits.append(numpy_helper.from_array(np.array(10**15, np.int64), "trips"))
    loop = helper.make_node("Loop", ["trips", "cond", "x"], ["y"], body=counting_body())
    save(helper.make_graph([loop], name, inputs, [helper.make_tensor_value_info("y", F, [1])], inits), name + ".onnx")


def nested_if():
    """If(c1){ If(c2){ a + x } else { a - x } } else { -a }, a = x * x computed in the main graph:
    the innermost branches read a main-graph value two scopes up."""
    def branch(name, node):
        return helper.make_graph([node], name, [], [helper.make_tensor_value_info(node.output[0], F, [2])])
    inner = helper.make_node("If", ["c2"], ["inner_out"],
                             then_branch=branch("inner_then", helper.make_node("Add", ["a", "x"], ["t_out"])),
                             else_branch=branch("inner_else", helper.make_node("Sub", ["a", "x"], ["e_out"])))
    outer = helper.make_node("If", ["c1"], ["y"], then_branch=branch("outer_then", inner),
                             else_branch=branch("outer_else", helper.make_node("Neg", ["a"], ["n_out"])))
    save(helper.make_graph(
        [helper.make_node("Mul", ["x", "x"], ["a"]), outer], "nested_if",
        [helper.make_tensor_value_info("x", F, [2]), helper.make_tensor_value_info("c1", B, []),
         helper.make_tensor_value_info("c2", B, [])],
        [helper.make_tensor_value_info("y", F, [2])]), "nested_if.onnx")


def loop_if():
    """Loop(3) { v_out = If(c) { v + a } else { v - a } }, a = x * x in the main graph: an If inside
    a Loop body reads a main-graph value."""
    def branch(name, op):
        return helper.make_graph([helper.make_node(op, ["v", "a"], [name + "_out"])], name, [],
                                 [helper.make_tensor_value_info(name + "_out", F, [2])])
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("If", ["c"], ["v_out"], then_branch=branch("plus", "Add"),
                          else_branch=branch("minus", "Sub"))],
        "body",
        [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("cond_in", B, []),
         helper.make_tensor_value_info("v", F, [2])],
        [helper.make_tensor_value_info("cond_out", B, []), helper.make_tensor_value_info("v_out", F, [2])])
    save(helper.make_graph(
        [helper.make_node("Mul", ["x", "x"], ["a"]),
         helper.make_node("Loop", ["trips", "cond", "x"], ["y"], body=body)], "loop_if",
        [helper.make_tensor_value_info("x", F, [2]), helper.make_tensor_value_info("c", B, [])],
        [helper.make_tensor_value_info("y", F, [2])],
        [numpy_helper.from_array(np.array(3, np.int64), "trips"), numpy_helper.from_array(np.array(True), "cond")]),
        "loop_if.onnx")


if __name__ == "__main__":
    loop_model("loop_forever", trip_is_input=False)
    loop_model("loop_trips", trip_is_input=True)
    nested_if()
    loop_if()
