package main
import (
 _ "github.com/mark3labs/mcp-go/mcp"
 _ "github.com/mark3labs/mcp-go/server"
 _ "github.com/mark3labs/mcp-go/client"
)
func main(){}
