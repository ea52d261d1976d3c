"""Pictures of a timeline: Gantt charts (PNG/SVG) and Perfetto traces."""
