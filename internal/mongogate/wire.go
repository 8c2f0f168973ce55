package mongogate

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// Wire protocol constants: only what the gate needs to route a message.
// See https://www.mongodb.com/docs/manual/reference/mongodb-wire-protocol/.
const (
	headerLen = 16

	opMsg = 2013

	flagChecksumPresent = 1 << 0
	flagMoreToCome      = 1 << 1

	// maxMessageLen bounds a message so a corrupt length cannot make the gate
	// allocate gigabytes. MongoDB's own limit is 48 MB (maxMessageSizeBytes).
	maxMessageLen = 48 * 1000 * 1000
)

// writeCommands are the commands FerretDB v1 executes as a read followed by a
// separate write, which is what breaks single-document atomicity.
var writeCommands = []string{"insert", "update", "delete", "findAndModify"}

// schemaCommands change collections or indexes. They run alone, like a write
// whose documents the gate cannot name, so that no write races a collection
// being created, dropped or re-indexed under it.
var schemaCommands = []string{
	"create", "drop", "dropDatabase", "createIndexes", "dropIndexes",
	"renameCollection", "collMod", "compact",
}

// message is one raw wire-protocol message: header and body exactly as
// received, so it can be forwarded byte for byte.
type message struct {
	raw []byte
}

func (m message) requestID() int32  { return int32(binary.LittleEndian.Uint32(m.raw[4:])) }
func (m message) responseTo() int32 { return int32(binary.LittleEndian.Uint32(m.raw[8:])) }
func (m message) opCode() int32     { return int32(binary.LittleEndian.Uint32(m.raw[12:])) }

// readMessage reads one whole message. It returns io.EOF only when the peer
// closed the connection cleanly between messages.
func readMessage(r io.Reader) (message, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return message{}, err
	}

	n := int32(binary.LittleEndian.Uint32(hdr[:]))
	if n < headerLen || n > maxMessageLen {
		return message{}, fmt.Errorf("invalid message length %d", n)
	}

	raw := make([]byte, n)
	copy(raw, hdr[:])

	if _, err := io.ReadFull(r, raw[4:]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return message{}, fmt.Errorf("read message body: %w", err)
	}

	return message{raw: raw}, nil
}

// opMsgInfo is what the gate learns from an OP_MSG request.
type opMsgInfo struct {
	moreToCome bool   // the client expects no reply
	command    string // first key of the body (kind 0) section; "" if unparsable

	// For writes: the documents the command can change, each named by
	// database, collection and _id, and whether it must run alone because
	// the gate could not name them all (see targets).
	docs      []string
	exclusive bool
}

// isWrite reports whether the request is a write command that must run under
// the gate.
func (i opMsgInfo) isWrite() bool {
	return i.command != "" && (oneOf(i.command, writeCommands) || oneOf(i.command, schemaCommands))
}

// freeCommands are the commands FerretDB answers without PostgreSQL: the
// driver's handshake and monitoring, which must not queue behind the herd
// of reads and writes (a monitor that times out marks the server unknown
// and clears the driver's pool).
var freeCommands = []string{"hello", "isMaster", "ping", "buildInfo", "endSessions", "whatsMyURI", "getParameter", "connectionStatus"}

// needsUpstreamWork reports whether the request may take one of FerretDB's
// PostgreSQL connections, and so counts against the gate's in-flight
// bound: every command but the free ones.
func (i opMsgInfo) needsUpstreamWork() bool {
	return !i.moreToCome && !oneOf(i.command, freeCommands)
}

func oneOf(name string, names []string) bool {
	for _, c := range names {
		if strings.EqualFold(name, c) {
			return true
		}
	}
	return false
}

// parseOpMsg reads the flag bits, the command name and, for a write, the
// documents it targets. It never fails: a message it cannot parse yields an
// empty command name, and FerretDB will reject such a message anyway; a
// write it cannot read further is exclusive.
func parseOpMsg(m message) opMsgInfo {
	b := m.raw[headerLen:]
	if len(b) < 4 {
		return opMsgInfo{}
	}

	flags := binary.LittleEndian.Uint32(b)
	info := opMsgInfo{moreToCome: flags&flagMoreToCome != 0}

	b = b[4:]
	if flags&flagChecksumPresent != 0 && len(b) >= 4 {
		b = b[:len(b)-4]
	}

	// The body section is usually first, but the protocol allows document
	// sequences (kind 1) before it or after it; a write's documents
	// (insert's "documents", update's "updates", delete's "deletes") come
	// in either.
	var body bsoncore.Document
	seqs := map[string][]bsoncore.Document{}
	for len(b) > 0 {
		kind := b[0]
		b = b[1:]

		if len(b) < 4 {
			break
		}
		size := int(binary.LittleEndian.Uint32(b))
		if size < 5 || size > len(b) {
			break
		}

		switch kind {
		case 0:
			body = bsoncore.Document(b[:size])
		case 1:
			id, docs, ok := parseSequence(b[4:size])
			if !ok {
				seqs = nil
			} else if seqs != nil {
				seqs[id] = append(seqs[id], docs...)
			}
		}
		if kind > 1 {
			break
		}
		b = b[size:]
	}
	if body == nil {
		return info
	}
	info.command = firstKey(body)
	if info.isWrite() {
		info.docs, info.exclusive = targets(info.command, body, seqs)
	}
	return info
}

// parseSequence splits the payload of a kind 1 section (after its size):
// a NUL-terminated identifier, then documents.
func parseSequence(b []byte) (string, []bsoncore.Document, bool) {
	end := bytes.IndexByte(b, 0)
	if end < 0 {
		return "", nil, false
	}
	id := string(b[:end])
	b = b[end+1:]
	var docs []bsoncore.Document
	for len(b) > 0 {
		doc, rest, ok := bsoncore.ReadDocument(b)
		if !ok {
			return "", nil, false
		}
		docs = append(docs, doc)
		b = rest
	}
	return id, docs, true
}

// targets names the documents a write command can change, as
// "db\x00collection\x00_id", sorted and without repeats. It reports
// exclusive when it cannot name them all: a schema command, a filter
// without a plain _id (a multi-document update, {_id: {$in: ...}}, $or,
// ...), an insert of a document without _id, an _id of a type it does not
// compare as MongoDB does, or anything it does not parse. Two writes
// with no document in common never touch the same document.
func targets(command string, body bsoncore.Document, seqs map[string][]bsoncore.Document) ([]string, bool) {
	if seqs == nil || oneOf(command, schemaCommands) || body.Validate() != nil {
		return nil, true
	}
	for _, docs := range seqs {
		for _, d := range docs {
			if d.Validate() != nil {
				return nil, true
			}
		}
	}
	db, ok := body.Lookup("$db").StringValueOK()
	if !ok {
		return nil, true
	}
	first, err := body.IndexErr(0)
	if err != nil {
		return nil, true
	}
	coll, ok := first.Value().StringValueOK()
	if !ok {
		return nil, true
	}

	// Each write of the command, and where its _id is.
	var docs []bsoncore.Document
	var idIn func(bsoncore.Document) bsoncore.Value
	switch {
	case strings.EqualFold(command, "findAndModify"):
		q, ok := body.Lookup("query").DocumentOK()
		if !ok {
			return nil, true
		}
		docs = []bsoncore.Document{q}
		idIn = func(q bsoncore.Document) bsoncore.Value { return soleID(q) }
	case strings.EqualFold(command, "insert"):
		docs, ok = batch(body, seqs, "documents")
		idIn = soleID
	case strings.EqualFold(command, "update"):
		docs, ok = batch(body, seqs, "updates")
		idIn = func(u bsoncore.Document) bsoncore.Value { return soleID(filter(u)) }
	case strings.EqualFold(command, "delete"):
		docs, ok = batch(body, seqs, "deletes")
		idIn = func(d bsoncore.Document) bsoncore.Value { return soleID(filter(d)) }
	}
	if !ok || len(docs) == 0 {
		return nil, true
	}

	keys := make([]string, 0, len(docs))
	for _, d := range docs {
		id, ok := idKey(idIn(d))
		if !ok {
			return nil, true
		}
		keys = append(keys, db+"\x00"+coll+"\x00"+id)
	}
	slices.Sort(keys)
	return slices.Compact(keys), false
}

// filter returns the q document of an update or delete statement, or nil.
func filter(stmt bsoncore.Document) bsoncore.Document {
	q, _ := stmt.Lookup("q").DocumentOK()
	return q
}

// soleID returns doc's _id, or an empty value (which names nothing) when
// doc is not a document or has no _id or more than one: with two, the gate
// and the server might each take another.
func soleID(doc bsoncore.Document) bsoncore.Value {
	elems, err := doc.Elements()
	if err != nil {
		return bsoncore.Value{}
	}
	var id bsoncore.Value
	n := 0
	for _, e := range elems {
		if e.Key() == "_id" {
			id, n = e.Value(), n+1
		}
	}
	if n != 1 {
		return bsoncore.Value{}
	}
	return id
}

// batch returns a write's documents from the body's array field name or the
// document sequence of that name, whichever the client sent.
func batch(body bsoncore.Document, seqs map[string][]bsoncore.Document, name string) ([]bsoncore.Document, bool) {
	if docs, ok := seqs[name]; ok {
		return docs, true
	}
	arr, ok := body.Lookup(name).ArrayOK()
	if !ok {
		return nil, false
	}
	vals, err := arr.Values()
	if err != nil {
		return nil, false
	}
	docs := make([]bsoncore.Document, 0, len(vals))
	for _, v := range vals {
		d, ok := v.DocumentOK()
		if !ok {
			return nil, false
		}
		docs = append(docs, d)
	}
	return docs, true
}

// idKey names an _id value so that two values MongoDB takes as the same
// _id get the same name. It accepts strings, ObjectIDs and integers (an
// int32 and an int64 of equal value are one _id, and so are integral
// doubles); anything else, a document of operators included, is refused.
func idKey(v bsoncore.Value) (string, bool) {
	switch v.Type {
	case bsoncore.TypeString:
		s, ok := v.StringValueOK()
		return "s" + s, ok
	case bsoncore.TypeObjectID:
		id, ok := v.ObjectIDOK()
		return "o" + hex.EncodeToString(id[:]), ok
	case bsoncore.TypeInt32:
		n, ok := v.Int32OK()
		return "n" + strconv.FormatInt(int64(n), 10), ok
	case bsoncore.TypeInt64:
		n, ok := v.Int64OK()
		return "n" + strconv.FormatInt(n, 10), ok
	case bsoncore.TypeDouble:
		f, ok := v.DoubleOK()
		if !ok || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			return "", false
		}
		return "n" + strconv.FormatInt(int64(f), 10), true
	}
	return "", false
}

// firstKey returns the name of the first element of a BSON document, or "".
func firstKey(doc []byte) string {
	// int32 length, then elements: type byte, NUL-terminated name, value.
	if len(doc) < 6 || doc[4] == 0 {
		return ""
	}

	name := doc[5:]
	end := bytes.IndexByte(name, 0)
	if end < 0 {
		return ""
	}

	return string(name[:end])
}
