"""The hand-written C++ engine reader (ops/core/npu_engine.cc) is tied to engine.proto: its
field numbers, field kinds, enum ranges and opcode names (ops/core/npu_format.h, read back
through the native library's ratel_npu_wire_schema) must equal engine_pb2.DESCRIPTOR, and
every field of every message must be one the C++ reader knows."""
from google.protobuf.descriptor import FieldDescriptor

from ratelnn.npu import engine as engine_mod
from ratelnn.npu import native
from ratelnn.proto import engine_pb2 as pb

_KINDS = {FieldDescriptor.TYPE_INT32: "int32", FieldDescriptor.TYPE_INT64: "int64",
          FieldDescriptor.TYPE_UINT32: "uint32", FieldDescriptor.TYPE_UINT64: "uint64",
          FieldDescriptor.TYPE_SINT32: "sint32", FieldDescriptor.TYPE_SINT64: "sint64",
          FieldDescriptor.TYPE_BOOL: "bool", FieldDescriptor.TYPE_DOUBLE: "double",
          FieldDescriptor.TYPE_FLOAT: "float", FieldDescriptor.TYPE_STRING: "string",
          FieldDescriptor.TYPE_BYTES: "bytes", FieldDescriptor.TYPE_MESSAGE: "message",
          FieldDescriptor.TYPE_ENUM: "enum", FieldDescriptor.TYPE_FIXED32: "fixed32"}


def _repeated(field) -> bool:
    flag = getattr(field, "is_repeated", None)
    return bool(flag) if flag is not None else field.label == FieldDescriptor.LABEL_REPEATED


def descriptor_fields():
    """{(message, field): (number, kind, repeated)} of every message of engine.proto."""
    return {(m.name, f.name): (f.number, _KINDS.get(f.type, str(f.type)), _repeated(f))
            for m in pb.DESCRIPTOR.message_types_by_name.values() for f in m.fields}


def parse_schema(text):
    fields, enums, values, fmt = {}, {}, {}, None
    for line in text.splitlines():
        word, *rest = line.split()
        if word == "field":
            msg, name, number, kind, repeated = rest
            fields[(msg, name)] = (int(number), kind, repeated == "1")
        elif word == "enum":
            enums[rest[0]] = (int(rest[1]), int(rest[2]))
        elif word == "value":
            values[(rest[0], int(rest[1]))] = rest[2]
        elif word == "format":
            fmt = (int(rest[0]), int(rest[1]))
    return fields, enums, values, fmt


def schema_mismatches(text):
    """Every disagreement between the C++ schema `text` and engine_pb2.DESCRIPTOR."""
    fields, enums, values, _ = parse_schema(text)
    problems = []
    want = descriptor_fields()
    for key in sorted(set(want) | set(fields)):
        if key not in fields:
            problems.append(f"{key[0]}.{key[1]} is in engine.proto but not in ops/core/npu_format.h")
        elif key not in want:
            problems.append(f"{key[0]}.{key[1]} is in ops/core/npu_format.h but not in engine.proto")
        elif fields[key] != want[key]:
            problems.append(f"{key[0]}.{key[1]}: C++ (number, kind, repeated) {fields[key]}, proto {want[key]}")
    for name, enum in pb.DESCRIPTOR.enum_types_by_name.items():
        if name not in enums:
            problems.append(f"enum {name} has no range in ops/core/npu_format.h")
            continue
        lo, hi = enums[name]
        # the values the reader must accept: all but a proto3 *_UNSPECIFIED placeholder
        accepted = {v.number for v in enum.values if not v.name.endswith("_UNSPECIFIED")}
        if set(range(lo, hi + 1)) != accepted:
            problems.append(f"enum {name}: C++ accepts [{lo}, {hi}], engine.proto defines {sorted(accepted)}")
        for number in range(lo, hi + 1):
            cpp = values.get((name, number))
            proto = enum.values_by_number.get(number)
            if cpp is not None and (proto is None or cpp.upper() != proto.name):
                problems.append(f"enum {name} value {number}: C++ names it {cpp}, engine.proto "
                                f"{proto.name if proto else 'nothing'}")
    problems += [f"enum {name} is in ops/core/npu_format.h but not in engine.proto"
                 for name in enums if name not in pb.DESCRIPTOR.enum_types_by_name]
    return problems


def test_cpp_reader_constants_match_engine_proto():
    assert schema_mismatches(native.wire_schema()) == []


def test_every_opcode_and_dtype_has_a_cpp_name():
    _, enums, values, _ = parse_schema(native.wire_schema())
    for name in ("Opcode", "DType"):
        lo, hi = enums[name]
        assert [values[(name, v)].upper() for v in range(lo, hi + 1)] == \
            [pb.DESCRIPTOR.enum_types_by_name[name].values_by_number[v].name for v in range(lo, hi + 1)]
    assert enums["Opcode"][1] == max(pb.Opcode.values())


def test_cpp_and_python_write_the_same_format_version():
    *_, fmt = parse_schema(native.wire_schema())
    assert fmt == (engine_mod.FORMAT_MAJOR, engine_mod.FORMAT_MINOR)


def test_a_mismatch_is_reported():
    text = native.wire_schema()
    assert any("Attrs.axis" in p for p in
               schema_mismatches(text.replace("field Attrs axis 10 ", "field Attrs axis 16 ")))
    assert any("Opcode" in p for p in
               schema_mismatches(text.replace("enum Opcode 1 15", "enum Opcode 1 14")))
    assert any("Engine.sram_bytes" in p for p in
               schema_mismatches("\n".join(l for l in text.splitlines() if "sram_bytes" not in l)))
    assert any("act_min" in p for p in
               schema_mismatches(text.replace("field Attrs act_min 6 sint32", "field Attrs act_min 6 int32")))
