package live

import (
	"fmt"
	"time"

	"github.com/stocklock/stocklock/loadtest/harness"
)

// The page's flash-sale preset: loadtest flash's sale (docs/flash.md),
// smaller, so that it fits a class: 100 units, 5,000 buyers over 2 s,
// each with 2 s of patience.
const (
	pageFlashBuyers = 5_000
	pageFlashOver   = 2 * time.Second
	maxPageBuyers   = 20_000 // loadtest flash's default herd
)

// FlashForm is the flash sale's part of the form: Buyers arrive over Over
// in a burst, each waiting Patience for its answer.
type FlashForm struct {
	Buyers   int    `json:"buyers,omitempty"`
	Over     string `json:"over,omitempty"`
	Patience string `json:"patience,omitempty"`
}

// flashDefaults is the preset the page's flash-sale button fills in.
func flashDefaults() FlashForm {
	d := harness.DefaultFlash()
	return FlashForm{Buyers: pageFlashBuyers, Over: pageFlashOver.String(), Patience: d.Patience.String()}
}

// flash is the harness's flash scenario for the form's figures, the rest
// of loadtest flash's defaults; with an error, loadtest flash's own.
func (f FlashForm) flash() (*harness.Flash, error) {
	fl := harness.DefaultFlash()
	def := harness.DefaultFlash()
	var err error
	if fl.Over, err = time.ParseDuration(f.Over); err != nil {
		return def, fmt.Errorf("over %q: %w", f.Over, err)
	}
	if fl.Patience, err = time.ParseDuration(f.Patience); err != nil {
		return def, fmt.Errorf("patience %q: %w", f.Patience, err)
	}
	if f.Buyers < 1 || f.Buyers > maxPageBuyers {
		return def, fmt.Errorf("buyers %d: between 1 and %d on the page", f.Buyers, maxPageBuyers)
	}
	fl.Buyers = f.Buyers
	return fl, nil
}
