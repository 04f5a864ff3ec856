// Command hello prints a greeting: the program testenv's tests build.
package main

import "fmt"

func main() { fmt.Println("hello from a built program") }
