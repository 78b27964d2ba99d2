// Opcode values are facts of the pickle format (see CPython's pickletools).

package pickle

// Pickle opcodes, by the names CPython's pickletools gives them.
const (
	opMark            byte = 0x28
	opStop            byte = 0x2e
	opPop             byte = 0x30
	opPopMark         byte = 0x31
	opDup             byte = 0x32
	opFloat           byte = 0x46
	opInt             byte = 0x49
	opBinInt          byte = 0x4a
	opBinInt1         byte = 0x4b
	opLong            byte = 0x4c
	opBinInt2         byte = 0x4d
	opNone            byte = 0x4e
	opPersID          byte = 0x50
	opBinPersID       byte = 0x51
	opReduce          byte = 0x52
	opString          byte = 0x53
	opBinString       byte = 0x54
	opShortBinString  byte = 0x55
	opUnicode         byte = 0x56
	opBinUnicode      byte = 0x58
	opAppend          byte = 0x61
	opBuild           byte = 0x62
	opGlobal          byte = 0x63
	opDict            byte = 0x64
	opEmptyDict       byte = 0x7d
	opAppends         byte = 0x65
	opGet             byte = 0x67
	opBinGet          byte = 0x68
	opInst            byte = 0x69
	opLongBinGet      byte = 0x6a
	opList            byte = 0x6c
	opEmptyList       byte = 0x5d
	opObj             byte = 0x6f
	opPut             byte = 0x70
	opBinPut          byte = 0x71
	opLongBinPut      byte = 0x72
	opSetItem         byte = 0x73
	opTuple           byte = 0x74
	opEmptyTuple      byte = 0x29
	opSetItems        byte = 0x75
	opBinFloat        byte = 0x47
	opProto           byte = 0x80
	opNewObj          byte = 0x81
	opExt1            byte = 0x82
	opExt2            byte = 0x83
	opExt4            byte = 0x84
	opTuple1          byte = 0x85
	opTuple2          byte = 0x86
	opTuple3          byte = 0x87
	opNewTrue         byte = 0x88
	opNewFalse        byte = 0x89
	opLong1           byte = 0x8a
	opLong4           byte = 0x8b
	opBinBytes        byte = 0x42
	opShortBinBytes   byte = 0x43
	opShortBinUnicode byte = 0x8c
	opBinUnicode8     byte = 0x8d
	opBinBytes8       byte = 0x8e
	opEmptySet        byte = 0x8f
	opAddItems        byte = 0x90
	opFrozenSet       byte = 0x91
	opNewObjEx        byte = 0x92
	opStackGlobal     byte = 0x93
	opMemoize         byte = 0x94
	opFrame           byte = 0x95
	opByteArray8      byte = 0x96
	opNextBuffer      byte = 0x97
	opReadOnlyBuffer  byte = 0x98
)

var opNames = map[byte]string{
	opMark:            "MARK",
	opStop:            "STOP",
	opPop:             "POP",
	opPopMark:         "POP_MARK",
	opDup:             "DUP",
	opFloat:           "FLOAT",
	opInt:             "INT",
	opBinInt:          "BININT",
	opBinInt1:         "BININT1",
	opLong:            "LONG",
	opBinInt2:         "BININT2",
	opNone:            "NONE",
	opPersID:          "PERSID",
	opBinPersID:       "BINPERSID",
	opReduce:          "REDUCE",
	opString:          "STRING",
	opBinString:       "BINSTRING",
	opShortBinString:  "SHORT_BINSTRING",
	opUnicode:         "UNICODE",
	opBinUnicode:      "BINUNICODE",
	opAppend:          "APPEND",
	opBuild:           "BUILD",
	opGlobal:          "GLOBAL",
	opDict:            "DICT",
	opEmptyDict:       "EMPTY_DICT",
	opAppends:         "APPENDS",
	opGet:             "GET",
	opBinGet:          "BINGET",
	opInst:            "INST",
	opLongBinGet:      "LONG_BINGET",
	opList:            "LIST",
	opEmptyList:       "EMPTY_LIST",
	opObj:             "OBJ",
	opPut:             "PUT",
	opBinPut:          "BINPUT",
	opLongBinPut:      "LONG_BINPUT",
	opSetItem:         "SETITEM",
	opTuple:           "TUPLE",
	opEmptyTuple:      "EMPTY_TUPLE",
	opSetItems:        "SETITEMS",
	opBinFloat:        "BINFLOAT",
	opProto:           "PROTO",
	opNewObj:          "NEWOBJ",
	opExt1:            "EXT1",
	opExt2:            "EXT2",
	opExt4:            "EXT4",
	opTuple1:          "TUPLE1",
	opTuple2:          "TUPLE2",
	opTuple3:          "TUPLE3",
	opNewTrue:         "NEWTRUE",
	opNewFalse:        "NEWFALSE",
	opLong1:           "LONG1",
	opLong4:           "LONG4",
	opBinBytes:        "BINBYTES",
	opShortBinBytes:   "SHORT_BINBYTES",
	opShortBinUnicode: "SHORT_BINUNICODE",
	opBinUnicode8:     "BINUNICODE8",
	opBinBytes8:       "BINBYTES8",
	opEmptySet:        "EMPTY_SET",
	opAddItems:        "ADDITEMS",
	opFrozenSet:       "FROZENSET",
	opNewObjEx:        "NEWOBJ_EX",
	opStackGlobal:     "STACK_GLOBAL",
	opMemoize:         "MEMOIZE",
	opFrame:           "FRAME",
	opByteArray8:      "BYTEARRAY8",
	opNextBuffer:      "NEXT_BUFFER",
	opReadOnlyBuffer:  "READONLY_BUFFER",
}

// opName is the pickletools name of op, or "" for an unknown byte.
func opName(op byte) string { return opNames[op] }
