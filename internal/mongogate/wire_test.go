package mongogate

import (
	"bytes"
	"encoding/binary"
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

func TestReadMessageRejectsBadLength(t *testing.T) {
	t.Parallel()

	raw := binary.LittleEndian.AppendUint32(nil, 3)
	if _, err := readMessage(bytes.NewReader(append(raw, make([]byte, 12)...))); err == nil {
		t.Error("readMessage accepted a length shorter than the header")
	}
}
