"""ONNX Runtime's own model format (``.ort``) read back as an ONNX model, with int8 weights
kept int8.

Some packages ship their models as ``.ort`` files: ONNX Runtime's flatbuffer format, made for
minimal builds that load without optimising. A full ONNX Runtime loads them too, but runs
them as they were saved, and a weight-only quantised model then dequantises every weight on
every call: the Moonshine decoder that ``moonshine-cpp`` ships casts and scales all 81 of its
int8 weights for each token (70 ms a token here). Read back as ONNX, the graph goes through
ONNX Runtime's optimiser at load, which would fold the dequantisation into float weights once
(12 ms a token), at four times the weights' memory (the Moonshine base decoder: 438 MB).
:func:`int8_matmuls` keeps them int8 instead: each matrix product with such a weight becomes
ONNX Runtime's ``DynamicQuantizeMatMul`` (the activations quantised on the fly, int8 products),
a product with its transpose the same over a transposed copy, and a row lookup (an
embedding's ``Gather``) dequantises only the rows it takes. The Moonshine base decoder then
holds 58 MB and takes about 11 ms a token.

Rebuilding a model costs a few seconds and leaves the process some 100 MB larger (protobuf
and numpy buffers the allocator keeps), so :func:`int8_onnx_file` does it once per model file
and keeps the result in omniflow's cache folder; later loads read the cached file.

:func:`onnx_from_ort` rebuilds the ``ModelProto`` from the flatbuffer with the schema
bindings ONNX Runtime's wheel carries (``onnxruntime.tools.ort_format_model``) and the
``onnx`` package: graph, nested graphs (``If``/``Loop`` bodies), initialisers, attributes,
inputs and outputs with their types, opset imports. Sparse initialisers and the saved
runtime optimisations are not carried over (ONNX Runtime redoes what it needs).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from pathlib import Path
from typing import Any

from omniflow.errors import ConfigError, EngineError
from omniflow.resources import cache_dir

__all__ = ["int8_matmuls", "int8_onnx_file", "onnx_from_ort"]

#: Bumped when what :func:`int8_onnx_file` writes changes, so older cached files are not read.
CONVERTER_VERSION = 1

_ORT_IDENTIFIER = b"ORTM"  # the flatbuffer's file identifier, bytes 4..8


def onnx_from_ort(path: str | Path) -> bytes:
    """The ``.ort`` model at ``path`` as a serialised ONNX model, for
    ``onnxruntime.InferenceSession``. ConfigError when the file is missing or is not an ORT
    format model, EngineError when ``onnx`` is missing or the model cannot be rebuilt."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ConfigError(f"cannot read the ONNX Runtime model {path}: {err}") from err
    if data[4:8] != _ORT_IDENTIFIER:
        raise ConfigError(
            f"{path} is not an ONNX Runtime (.ort) model: its header is {data[4:8]!r}, "
            f"expected {_ORT_IDENTIFIER!r}"
        )
    onnx = _onnx()
    try:
        from onnxruntime.tools.ort_format_model.ort_flatbuffers_py import fbs
    except ImportError as err:
        raise EngineError(
            f"reading an .ort model needs onnxruntime (requirements/runtime.txt): {err}"
        ) from err
    try:
        session = fbs.InferenceSession.InferenceSession.GetRootAsInferenceSession(data, 0)
        model = session.Model()
        opsets = [
            onnx.helper.make_opsetid(_text(o.Domain()), o.Version())
            for o in (model.OpsetImport(i) for i in range(model.OpsetImportLength()))
        ]
        proto = onnx.helper.make_model(
            _Reader(onnx, fbs).graph(model.Graph(), "main"),
            opset_imports=opsets,
            ir_version=model.IrVersion(),
        )
    except (AttributeError, IndexError, TypeError, ValueError) as err:
        raise EngineError(f"cannot read the ONNX Runtime model {path}: {err}") from err
    return proto.SerializeToString()


def int8_onnx_file(path: str | Path, directory: str | Path | None = None) -> Path:
    """``path`` (an ``.ort`` or ``.onnx`` model) as an ONNX file with its int8 weights used
    as int8 (:func:`int8_matmuls`), made once into ``directory`` (default: ``onnx`` in
    omniflow's cache folder) through a temporary file renamed into place; its name carries a
    hash of the source's path, size and time, so a changed source is converted again.
    ConfigError when the source cannot be read, EngineError when the folder is not writable."""
    path = Path(path).resolve()
    try:
        st = path.stat()
    except OSError as err:
        raise ConfigError(f"cannot read the model {path}: {err}") from err
    key = f"{CONVERTER_VERSION} {path} {st.st_size} {st.st_mtime_ns}"
    folder = Path(directory).expanduser() if directory else cache_dir() / "onnx"
    target = folder / f"{path.stem}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.onnx"
    if target.is_file():
        return target
    model = onnx_from_ort(path) if path.suffix == ".ort" else path.read_bytes()
    model, _ = int8_matmuls(model)
    partial = folder / f".{target.name}.{os.getpid()}.{threading.get_ident()}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        partial.write_bytes(model)
        os.replace(partial, target)
    except OSError as err:
        raise EngineError(
            f"cannot write the converted model {target}: {err} (make {folder} writable, or "
            "set XDG_CACHE_HOME to a writable folder)"
        ) from err
    finally:
        with contextlib.suppress(OSError):  # renamed, or never written
            partial.unlink()
    return target


def _onnx() -> Any:
    try:
        import onnx
        import onnx.numpy_helper
    except ImportError as err:
        raise EngineError(
            f"rebuilding a model needs the onnx package (requirements/runtime.txt): {err}"
        ) from err
    return onnx


def _text(value: bytes | None) -> str:
    return value.decode() if value else ""


class _Reader:
    """Turns the flatbuffer's tables into ONNX protobuf messages."""

    def __init__(self, onnx: Any, fbs: Any) -> None:
        self.onnx = onnx
        self.fbs = fbs
        self.kinds = fbs.AttributeType.AttributeType

    def tensor(self, t: Any) -> Any:
        proto = self.onnx.TensorProto()
        proto.name = _text(t.Name())
        proto.dims.extend(t.Dims(j) for j in range(t.DimsLength()))
        proto.data_type = t.DataType()
        if t.DataType() == self.onnx.TensorProto.STRING:
            proto.string_data.extend(t.StringData(j) for j in range(t.StringDataLength()))
        elif t.RawDataLength():
            proto.raw_data = t.RawDataAsNumpy().tobytes()
        return proto

    def attribute(self, a: Any) -> Any:
        name, kind, k = _text(a.Name()), a.Type(), self.kinds
        make, types = self.onnx.helper.make_attribute, self.onnx.AttributeProto
        if kind == k.FLOAT:
            return make(name, a.F())
        if kind == k.INT:
            return make(name, a.I())
        if kind == k.STRING:
            return make(name, a.S())
        if kind == k.TENSOR:
            return make(name, self.tensor(a.T()))
        if kind == k.GRAPH:
            return make(name, self.graph(a.G(), name))
        if kind == k.FLOATS:
            return make(
                name, [a.Floats(j) for j in range(a.FloatsLength())], attr_type=types.FLOATS
            )
        if kind == k.INTS:
            return make(name, [a.Ints(j) for j in range(a.IntsLength())], attr_type=types.INTS)
        if kind == k.STRINGS:
            return make(
                name, [a.Strings(j) for j in range(a.StringsLength())], attr_type=types.STRINGS
            )
        if kind == k.TENSORS:
            tensors = [self.tensor(a.Tensors(j)) for j in range(a.TensorsLength())]
            return make(name, tensors, attr_type=types.TENSORS)
        if kind == k.GRAPHS:
            graphs = [self.graph(a.Graphs(j), name) for j in range(a.GraphsLength())]
            return make(name, graphs, attr_type=types.GRAPHS)
        raise ValueError(f"attribute {name!r} has a type this reader does not know ({kind})")

    def value_info(self, info: Any) -> Any:
        name, kind = _text(info.Name()), info.Type()
        if kind is None:
            return self.onnx.helper.make_empty_tensor_value_info(name)
        table = kind.Value()
        tensor_type = self.fbs.TensorTypeAndShape.TensorTypeAndShape()
        tensor_type.Init(table.Bytes, table.Pos)
        shape, dims = tensor_type.Shape(), None
        if shape is not None:
            dims = []
            for j in range(shape.DimLength()):
                value = shape.Dim(j).Value()
                fixed = value.DimType() == self.fbs.DimensionValueType.DimensionValueType.VALUE
                dims.append(value.DimValue() if fixed else _text(value.DimParam()) or None)
        return self.onnx.helper.make_tensor_value_info(name, tensor_type.ElemType(), dims)

    def graph(self, g: Any, name: str) -> Any:
        helper = self.onnx.helper
        args = {_text(g.NodeArgs(i).Name()): g.NodeArgs(i) for i in range(g.NodeArgsLength())}
        nodes = []
        for i in range(g.NodesLength()):
            n = g.Nodes(i)
            node = helper.make_node(
                _text(n.OpType()),
                [_text(n.Inputs(j)) for j in range(n.InputsLength())],
                [_text(n.Outputs(j)) for j in range(n.OutputsLength())],
                name=_text(n.Name()),
                domain=_text(n.Domain()),
            )
            attributes = range(n.AttributesLength())
            node.attribute.extend(self.attribute(n.Attributes(j)) for j in attributes)
            nodes.append(node)
        weights = [self.tensor(g.Initializers(i)) for i in range(g.InitializersLength())]
        constant = {w.name for w in weights}
        inputs = [_text(g.Inputs(i)) for i in range(g.InputsLength())]
        outputs = [_text(g.Outputs(i)) for i in range(g.OutputsLength())]
        return helper.make_graph(
            nodes,
            name,
            [self.value_info(args[i]) for i in inputs if i not in constant],
            [self.value_info(args[o]) for o in outputs],
            weights,
        )


def int8_matmuls(model: bytes) -> tuple[bytes, int]:
    """``model`` (a serialised ONNX model) with its weight-only int8 weights used as int8
    (module doc), and how many uses were rewritten. A weight qualifies when it is an int8
    initialiser dequantised as ``Cast -> Mul(scale) -> Add(offset)`` with one scale and an
    offset that is a whole number of steps (so it is an int8 zero point); uses other than
    ``MatMul`` (as its second input), a 2-D ``Transpose`` feeding ``MatMul`` and a ``Gather``
    on rows keep the float weight, which ONNX Runtime folds at load."""
    import numpy as np

    onnx = _onnx()
    helper, numpy_helper = onnx.helper, onnx.numpy_helper

    try:
        proto = onnx.load_from_string(model)
    except Exception as err:  # protobuf's DecodeError and others: the bytes are no model
        raise EngineError(f"cannot read an ONNX model from {len(model)} bytes: {err}") from err
    graph = proto.graph
    weights = {t.name: t for t in graph.initializer}
    producer = {out: node for node in graph.node for out in node.output}
    chains: dict[str, tuple[str, str, str, int]] = {}  # float weight -> q, scale, offset, zp
    for add in graph.node:
        mul = producer.get(add.input[0]) if add.op_type == "Add" else None
        cast = producer.get(mul.input[0]) if mul is not None and mul.op_type == "Mul" else None
        if cast is None or cast.op_type != "Cast" or cast.input[0] not in weights:
            continue
        names = (cast.input[0], mul.input[1], add.input[1])
        if not all(n in weights for n in names):
            continue
        q, scale, offset = (weights[n] for n in names)
        scale_v, offset_v = numpy_helper.to_array(scale), numpy_helper.to_array(offset)
        if q.data_type != onnx.TensorProto.INT8 or scale_v.size != 1 or offset_v.size != 1:
            continue
        zero = -float(offset_v.ravel()[0]) / float(scale_v.ravel()[0])
        if abs(zero - round(zero)) > 1e-3 or not -128 <= round(zero) <= 127:
            continue
        chains[add.output[0]] = (*names, round(zero))
    added: dict[str, Any] = {}
    rewritten = 0

    def zero_point(q: str, zero: int) -> str:
        name = f"{q}_zero_point_int8"
        added.setdefault(name, numpy_helper.from_array(np.array(zero, np.int8), name))
        return name

    def transposed(q: str) -> str:
        name = f"{q}_transposed_int8"
        if name not in added:
            array = np.ascontiguousarray(numpy_helper.to_array(weights[q]).T)
            added[name] = numpy_helper.from_array(array, name)
        return name

    def rewrite(g: Any) -> None:
        nonlocal rewritten
        transposes = {
            n.output[0]: chains[n.input[0]]
            for n in g.node
            if n.op_type == "Transpose"
            and n.input[0] in chains
            and all(list(a.ints) in ([], [1, 0]) for a in n.attribute)
            and len(weights[chains[n.input[0]][0]].dims) == 2
        }
        nodes = []
        for n in g.node:
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    rewrite(a.g)
                for sub in a.graphs:
                    rewrite(sub)
            b = n.input[1] if n.op_type == "MatMul" else None
            if b in chains or b in transposes:
                q, scale, _, zero = chains[b] if b in chains else transposes[b]
                q = q if b in chains else transposed(q)
                nodes.append(
                    helper.make_node(
                        "DynamicQuantizeMatMul",
                        [n.input[0], q, scale, zero_point(q, zero)],
                        list(n.output),
                        name=f"{n.name}_int8",
                        domain="com.microsoft",
                    )
                )
                rewritten += 1
            elif n.op_type == "Gather" and n.input[0] in chains and not n.attribute:
                q, scale, offset, _ = chains[n.input[0]]
                rows, scaled = f"{n.output[0]}_int8", f"{n.output[0]}_scaled"
                nodes += [
                    helper.make_node("Gather", [q, n.input[1]], [rows + "_q"], name=rows),
                    helper.make_node(
                        "Cast",
                        [rows + "_q"],
                        [rows],
                        to=onnx.TensorProto.FLOAT,
                        name=rows + "_cast",
                    ),
                    helper.make_node("Mul", [rows, scale], [scaled], name=scaled),
                    helper.make_node("Add", [scaled, offset], list(n.output), name=n.output[0]),
                ]
                rewritten += 1
            else:
                nodes.append(n)
        used = {i for n in nodes for i in n.input}
        nodes = [
            n
            for n in nodes
            if not (
                n.op_type == "Transpose" and n.output[0] in transposes and n.output[0] not in used
            )
        ]
        del g.node[:]
        g.node.extend(nodes)

    rewrite(graph)
    # The float chains nothing uses any more go: ONNX Runtime would fold them first.
    used = _inputs(graph)
    dead: set[str] = set()
    for out in chains:
        if out not in used:
            add = producer[out]
            mul = producer[add.input[0]]
            dead |= {add.output[0], mul.output[0], mul.input[0]}
    kept = [n for n in graph.node if n.output[0] not in dead]
    del graph.node[:]
    graph.node.extend(kept)
    graph.initializer.extend(added.values())
    if rewritten and not any(o.domain == "com.microsoft" for o in proto.opset_import):
        proto.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return proto.SerializeToString(), rewritten


def _inputs(graph: Any) -> set[str]:
    """Every name a node of ``graph`` or of its nested graphs reads, and its outputs."""
    names = {o.name for o in graph.output}
    for node in graph.node:
        names.update(node.input)
        for a in node.attribute:
            for sub in [a.g] if a.HasField("g") else list(a.graphs):
                names |= _inputs(sub)
    return names
