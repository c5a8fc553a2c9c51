package setup

import "os"

var osGetenv = os.Getenv
