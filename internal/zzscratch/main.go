package main

import (
	"fmt"
	"os"

	"github.com/stocklock/stocklock/internal/mongogate"
)

func main() {
	g, err := mongogate.Start(os.Args[1], nil)
	if err != nil {
		panic(err)
	}
	fmt.Println(g.Addr())
	select {}
}
