package mongogate

import (
	"bytes"
	"encoding/binary"
	"slices"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// opMsgBytes builds an OP_MSG with the given flags and sections, each
// section already encoded with its kind byte.
func opMsgBytes(t *testing.T, flags uint32, sections ...[]byte) []byte {
	t.Helper()

	body := binary.LittleEndian.AppendUint32(nil, flags)
	for _, s := range sections {
		body = append(body, s...)
	}
	if flags&flagChecksumPresent != 0 {
		body = binary.LittleEndian.AppendUint32(body, 0xdeadbeef)
	}

	msg := binary.LittleEndian.AppendUint32(nil, uint32(headerLen+len(body)))
	msg = binary.LittleEndian.AppendUint32(msg, 7) // requestID
	msg = binary.LittleEndian.AppendUint32(msg, 0) // responseTo
	msg = binary.LittleEndian.AppendUint32(msg, opMsg)
	return append(msg, body...)
}

func bodySection(t *testing.T, doc bson.D) []byte {
	t.Helper()

	b, err := bson.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte{0}, b...)
}

func sequenceSection(t *testing.T, id string, docs ...bson.D) []byte {
	t.Helper()

	payload := append([]byte(id), 0)
	for _, d := range docs {
		b, err := bson.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		payload = append(payload, b...)
	}
	s := binary.LittleEndian.AppendUint32([]byte{1}, uint32(4+len(payload)))
	return append(s, payload...)
}

func TestParseOpMsg(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name       string
		raw        []byte
		command    string
		write      bool
		moreToCome bool
	}{{
		name:    "find",
		raw:     opMsgBytes(t, 0, bodySection(t, bson.D{{Key: "find", Value: "c"}, {Key: "$db", Value: "d"}})),
		command: "find",
	}, {
		name:    "update",
		raw:     opMsgBytes(t, 0, bodySection(t, bson.D{{Key: "update", Value: "c"}})),
		command: "update",
		write:   true,
	}, {
		name:    "case-insensitive",
		raw:     opMsgBytes(t, 0, bodySection(t, bson.D{{Key: "findandmodify", Value: "c"}})),
		command: "findandmodify",
		write:   true,
	}, {
		name: "sequence-before-body-with-checksum",
		raw: opMsgBytes(t, flagChecksumPresent,
			sequenceSection(t, "documents", bson.D{{Key: "_id", Value: 1}}),
			bodySection(t, bson.D{{Key: "insert", Value: "c"}})),
		command: "insert",
		write:   true,
	}, {
		name:       "more-to-come",
		raw:        opMsgBytes(t, flagMoreToCome, bodySection(t, bson.D{{Key: "delete", Value: "c"}})),
		command:    "delete",
		write:      true,
		moreToCome: true,
	}, {
		name: "truncated",
		raw:  opMsgBytes(t, 0, []byte{0, 200, 0, 0, 0}),
	}, {
		name: "empty-body",
		raw:  opMsgBytes(t, 0, bodySection(t, bson.D{})),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := readMessage(bytes.NewReader(tc.raw))
			if err != nil {
				t.Fatalf("readMessage: %v", err)
			}
			if m.opCode() != opMsg || m.requestID() != 7 {
				t.Fatalf("header: opCode %d requestID %d", m.opCode(), m.requestID())
			}

			info := parseOpMsg(m)
			if info.command != tc.command || info.isWrite() != tc.write || info.moreToCome != tc.moreToCome {
				t.Errorf("got %+v (write %v), want command %q write %v moreToCome %v",
					info, info.isWrite(), tc.command, tc.write, tc.moreToCome)
			}
		})
	}
}

// TestParseOpMsgTargets checks which documents a write is taken to touch,
// and that every write the gate cannot name runs alone.
func TestParseOpMsgTargets(t *testing.T) {
	t.Parallel()

	oid := bson.NewObjectID()
	key := func(id string) string { return "d\x00c\x00" + id }
	for _, tc := range []struct {
		name      string
		raw       []byte
		docs      []string
		exclusive bool
	}{{
		name: "findAndModify by _id and more",
		raw: opMsgBytes(t, 0, bodySection(t, bson.D{{Key: "findAndModify", Value: "c"},
			{Key: "query", Value: bson.D{{Key: "_id", Value: "k"}, {Key: "owner", Value: ""}}}, {Key: "$db", Value: "d"}})),
		docs: []string{key("sk")},
	}, {
		name: "update batch in a sequence, repeats merged, sorted",
		raw: opMsgBytes(t, 0, bodySection(t, bson.D{{Key: "update", Value: "c"}, {Key: "$db", Value: "d"}}),
			sequenceSection(t, "updates",
				bson.D{{Key: "q", Value: bson.D{{Key: "_id", Value: "b"}}}},
				bson.D{{Key: "q", Value: bson.D{{Key: "_id", Value: "a"}, {Key: "v", Value: 1}}}},
				bson.D{{Key: "q", Value: bson.D{{Key: "_id", Value: "b"}}}})),
		docs: []string{key("sa"), key("sb")},
	}, {
		name: "update batch in the body",
		raw: opMsgBytes(t, 0, bodySection(t, bson.D{{Key: "update", Value: "c"},
			{Key: "updates", Value: bson.A{bson.D{{Key: "q", Value: bson.D{{Key: "_id", Value: oid}}}}}}, {Key: "$db", Value: "d"}})),
		docs: []string{key("o" + oid.Hex())},
	}, {
		name: "int32, int64 and integral double are one _id",
		raw: opMsgBytes(t, 0, bodySection(t, bson.D{{Key: "delete", Value: "c"}, {Key: "$db", Value: "d"}}),
			sequenceSection(t, "deletes",
				bson.D{{Key: "q", Value: bson.D{{Key: "_id", Value: int32(7)}}}},
				bson.D{{Key: "q", Value: bson.D{{Key: "_id", Value: int64(7)}}}},
				bson.D{{Key: "q", Value: bson.D{{Key: "_id", Value: 7.0}}}})),
		docs: []string{key("n7")},
	}, {
		name: "insert",
		raw: opMsgBytes(t, 0, bodySection(t, bson.D{{Key: "insert", Value: "c"}, {Key: "$db", Value: "d"}}),
			sequenceSection(t, "documents", bson.D{{Key: "_id", Value: "x"}, {Key: "n", Value: 1}})),
		docs: []string{key("sx")},
	}, {
		name: "insert without _id",
		raw: opMsgBytes(t, 0, bodySection(t, bson.D{{Key: "insert", Value: "c"}, {Key: "$db", Value: "d"}}),
			sequenceSection(t, "documents", bson.D{{Key: "n", Value: 1}})),
		exclusive: true,
	}, {
		name: "filter without _id",
		raw: opMsgBytes(t, 0, bodySection(t, bson.D{{Key: "update", Value: "c"}, {Key: "$db", Value: "d"}}),
			sequenceSection(t, "updates", bson.D{{Key: "q", Value: bson.D{{Key: "sku", Value: "x"}}}, {Key: "multi", Value: true}})),
		exclusive: true,
	}, {
		name: "one write of the batch without _id",
		raw: opMsgBytes(t, 0, bodySection(t, bson.D{{Key: "delete", Value: "c"}, {Key: "$db", Value: "d"}}),
			sequenceSection(t, "deletes",
				bson.D{{Key: "q", Value: bson.D{{Key: "_id", Value: "a"}}}},
				bson.D{{Key: "q", Value: bson.D{}}})),
		exclusive: true,
	}, {
		name: "_id with operators",
		raw: opMsgBytes(t, 0, bodySection(t, bson.D{{Key: "findAndModify", Value: "c"},
			{Key: "query", Value: bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{"a", "b"}}}}}}, {Key: "$db", Value: "d"}})),
		exclusive: true,
	}, {
		name: "two _id keys in a filter",
		raw: opMsgBytes(t, 0, bodySection(t, bson.D{{Key: "findAndModify", Value: "c"},
			{Key: "query", Value: bson.D{{Key: "_id", Value: "a"}, {Key: "_id", Value: "b"}}}, {Key: "$db", Value: "d"}})),
		exclusive: true,
	}, {
		name: "fractional double _id",
		raw: opMsgBytes(t, 0, bodySection(t, bson.D{{Key: "findAndModify", Value: "c"},
			{Key: "query", Value: bson.D{{Key: "_id", Value: 1.5}}}, {Key: "$db", Value: "d"}})),
		exclusive: true,
	}, {
		name:      "no $db",
		raw:       opMsgBytes(t, 0, bodySection(t, bson.D{{Key: "findAndModify", Value: "c"}, {Key: "query", Value: bson.D{{Key: "_id", Value: "k"}}}})),
		exclusive: true,
	}, {
		name:      "no batch",
		raw:       opMsgBytes(t, 0, bodySection(t, bson.D{{Key: "update", Value: "c"}, {Key: "$db", Value: "d"}})),
		exclusive: true,
	}, {
		name:      "schema command",
		raw:       opMsgBytes(t, 0, bodySection(t, bson.D{{Key: "createIndexes", Value: "c"}, {Key: "$db", Value: "d"}})),
		exclusive: true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := readMessage(bytes.NewReader(tc.raw))
			if err != nil {
				t.Fatalf("readMessage: %v", err)
			}
			info := parseOpMsg(m)
			if !info.isWrite() {
				t.Fatalf("%q not taken for a write", info.command)
			}
			if info.exclusive != tc.exclusive || !slices.Equal(info.docs, tc.docs) {
				t.Errorf("got docs %q exclusive %v, want %q exclusive %v", info.docs, info.exclusive, tc.docs, tc.exclusive)
			}
		})
	}
}

func TestReadMessageRejectsBadLength(t *testing.T) {
	t.Parallel()

	raw := binary.LittleEndian.AppendUint32(nil, 3)
	if _, err := readMessage(bytes.NewReader(append(raw, make([]byte, 12)...))); err == nil {
		t.Error("readMessage accepted a length shorter than the header")
	}
}
