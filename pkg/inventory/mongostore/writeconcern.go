package mongostore

import (
	"fmt"
	"strconv"

	"github.com/stocklock/stocklock/pkg/inventory"

	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
)

// ParseWriteConcern turns "majority" or a number of nodes ("1", "2", ...)
// into a journaled write concern. Unacknowledged writes ("0") are refused:
// every strategy needs to know whether its write matched, a fenced write
// above all, and an unacknowledged write cannot say.
func ParseWriteConcern(s string) (*writeconcern.WriteConcern, error) {
	journal := true
	if s == "majority" {
		return &writeconcern.WriteConcern{W: "majority", Journal: &journal}, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return nil, fmt.Errorf("%w: write concern %q: want \"majority\" or a number of nodes >= 1", inventory.ErrInvalid, s)
	}
	return &writeconcern.WriteConcern{W: n, Journal: &journal}, nil
}
