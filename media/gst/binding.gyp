{
  "targets": [
    {
      "target_name": "reverie_gst",
      "sources": ["reverie_gst.c"],
      "cflags": ["<!@(pkg-config --cflags gstreamer-1.0 gstreamer-app-1.0 gstreamer-video-1.0)", "-Wall", "-Wextra", "-Wno-unused-parameter"],
      "libraries": ["<!@(pkg-config --libs gstreamer-1.0 gstreamer-app-1.0 gstreamer-video-1.0)"]
    }
  ]
}
